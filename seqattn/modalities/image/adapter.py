"""Images as sequences of vectors -> Tokens (the seed: a 5×10 RGB image is 50 vectors of 3 values).

- ``mode="pixels"``: every pixel is a token of ``C`` channel values, projected to the model width;
  an ``H×W`` image gives ``H·W`` tokens in row-major order.
- ``mode="patches"``: every ``p×p`` patch is a token of ``p·p·C`` values (ViT-style), for larger
  images; an image whose side is not a multiple of ``p`` is zero-padded (padding masked) up to one.

Position lives in the adapter, in 2-D (the encoder then runs with ``positional=none``):

- ``sinusoidal2d``: half of the width encodes the row, half the column (sin/cos of
  "Attention is all you need" per axis); any grid size.
- ``learned2d``: one trained vector per grid cell of a fixed ``grid=(h, w)``; another grid size
  raises ``ValueError`` naming both, unless ``interpolate=True`` (then the table is resized
  bilinearly to the input grid).
- ``none``: no position: the encoder is permutation-equivariant over pixels (a bag of pixels).

``window=k`` restricts attention to each token's ``k×k`` grid neighbourhood (the seed's "a CNN is
self-attention with a fixed receptive field"), described as ``Tokens.grid_window`` (the pairs of
:func:`~seqattn.core.masks.grid_window_mask`, never an ``[L, L]`` tensor): the encoder plans a
blocked band kernel whose cost follows the ``k×k`` neighbourhoods. It is the one 2-D window knob
(``adapter.window``); the encoder's ``model.window`` is a 1-D ±w window over token order, and both
together mean their logical AND, planned as a dense mask (the run log says so).

Padding: a batch of images of different sizes is padded bottom/right and marked by
``pixel_mask [B, H, W]`` (True = real pixel); padded pixels become masked tokens and their
values never reach a real token, so each image gets the same output as alone.

Letters: b batch, c channels, h/w grid rows/columns, p patch side, l tokens, d model width.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.dropout import Dropout
from seqattn.core.positional import sinusoidal_table
from seqattn.core.tokens import Tokens
from seqattn.model.protocols import AdapterBase, TargetLayout, TokenTargets

MODES = ("pixels", "patches")
POSITIONALS_2D = ("sinusoidal2d", "learned2d", "none")


def sinusoidal_2d_table(height: int, width: int, dim: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """``[H·W, D]`` row-major table: ``D/2`` sin/cos channels of the row, ``D/2`` of the column."""
    if dim % 4:
        raise ValueError(f"sinusoidal2d needs a model width divisible by 4, got dim={dim}")
    rows = sinusoidal_table(height, dim // 2, device, dtype)  # [H, D/2]
    cols = sinusoidal_table(width, dim // 2, device, dtype)  # [W, D/2]
    table = torch.cat([rows[:, None, :].expand(height, width, dim // 2),
                       cols[None, :, :].expand(height, width, dim // 2)], dim=-1)  # [H, W, D]
    return table.reshape(height * width, dim)


class ImageAdapter(AdapterBase):
    """``forward(images [B, C, H, W], pixel_mask [B, H, W] | None) -> Tokens``.

    Args:
        dim: model width D.
        mode: ``pixels`` (a token per pixel) | ``patches`` (a token per ``patch_size²`` patch).
        patch_size: patch side p for ``mode="patches"``, or ``"auto"``: about 8 patches per side of the
            training image (``max(1, round(min(H, W) / 8))``: 8×8 -> 1, 16×16 -> 2, 28×28 -> 4, 64×64 -> 8).
        in_channels: channels the projection expects (3 = RGB); a 1-channel (grayscale) input is
            repeated to ``in_channels``; any other mismatch raises ``ValueError``.
        positional: ``sinusoidal2d`` | ``learned2d`` | ``none`` (added here, in 2-D).
        image_size: ``H`` or ``(H, W)`` of the training images (from the data's spec,
            ``sizes.image_size``): ``learned2d``'s grid is
            ``ceil(H / p) × ceil(W / p)`` unless ``grid`` is given.
        grid: ``(h, w)`` token grid of ``learned2d`` (pixels: the image size; patches: size / p).
        interpolate: ``learned2d`` only: resize the table to another grid instead of raising; in a padded
            batch each image's table is resized to its own grid (the same positions as alone).
        window: odd ``k``: each token attends only to its ``k×k`` grid neighbourhood; None = global.
        normalize: ``fixed`` -- ``(x - mean) / std`` per channel with the given values; ``image`` --
            per image and channel over its real pixels (zero mean, unit std: the background colour,
            which carries no class information, no longer has to be learned away).
        mean, std: per-channel values of ``normalize="fixed"`` (images in [0, 1] by default).
        dropout: on the token vectors after the positional encoding.

    Returns ``Tokens(x [B, L, D], mask [B, L] | None, grid=(h, w), grid_window=window,
    extra={"patch_size": p})`` with ``L = h·w`` (row-major).
    """

    inputs = ("images", "pixel_mask")
    spec_fields = {"image_size": "sizes.image_size"}

    def __init__(
        self,
        dim: int,
        mode: str = "pixels",
        patch_size: int | str = 4,
        in_channels: int = 3,
        positional: str = "sinusoidal2d",
        image_size: int | Sequence[int] | None = None,
        grid: Sequence[int] | None = None,
        interpolate: bool = False,
        window: int | None = None,
        normalize: str = "fixed",
        mean: Sequence[float] | None = (0.5, 0.5, 0.5),
        std: Sequence[float] | None = (0.25, 0.25, 0.25),
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown image mode {mode!r}; expected one of {MODES}")
        if positional not in POSITIONALS_2D:
            raise ValueError(f"unknown image positional encoding {positional!r}; expected one of {POSITIONALS_2D}")
        if normalize not in ("fixed", "image"):
            raise ValueError(f"normalize must be 'fixed' or 'image', got {normalize!r}")
        if in_channels < 1:
            raise ValueError(f"in_channels must be >= 1, got {in_channels}")
        if mode == "patches" and patch_size == "auto":
            if image_size is None:
                raise ValueError("patch_size='auto' needs the training image size (image_size, from the data)")
            size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
            patch_size = max(1, round(min(int(s) for s in size) / 8))
        if mode == "patches" and (patch_size is None or isinstance(patch_size, str) or int(patch_size) < 1):
            raise ValueError(f"mode='patches' needs patch_size >= 1 or 'auto', got {patch_size!r}")
        if window is not None and (int(window) < 1 or int(window) % 2 == 0):
            raise ValueError(f"window must be an odd size >= 1 (a k×k neighbourhood) or None, got {window}")
        if positional == "sinusoidal2d" and dim % 4:
            raise ValueError(f"positional='sinusoidal2d' needs dim divisible by 4, got dim={dim}")
        self.dim, self.mode, self.in_channels, self.normalize = dim, mode, in_channels, normalize
        self.patch = int(patch_size) if mode == "patches" else 1
        self.positional, self.interpolate = positional, interpolate
        self.window = None if window is None else int(window)
        for name, values in (("mean", mean), ("std", std)):
            if values is not None and len(values) != in_channels:
                raise ValueError(f"{name} needs one value per channel ({in_channels}), got {list(values)}")
        if std is not None and any(float(s) <= 0 for s in std):
            raise ValueError(f"std values must be positive, got {list(std)}")
        self.register_buffer("mean", torch.tensor(list(mean or [0.0] * in_channels), dtype=torch.float32))
        self.register_buffer("std", torch.tensor(list(std or [1.0] * in_channels), dtype=torch.float32))
        self.proj = nn.Linear(in_channels * self.patch**2, dim)
        self.grid = None
        if positional == "learned2d":
            if grid is None and image_size is not None:
                size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
                grid = tuple(-(-int(s) // self.patch) for s in size)  # ceil(size / p)
            if grid is None or len(grid) != 2 or int(grid[0]) < 1 or int(grid[1]) < 1:
                raise ValueError(f"positional='learned2d' needs grid=(h, w) or image_size of positive ints, "
                                 f"got grid={grid!r}")
            self.grid = (int(grid[0]), int(grid[1]))
            self.pos_table = nn.Parameter(torch.randn(dim, *self.grid) * 0.02)  # [D, h, w]
        self.drop = Dropout(dropout)

    # -------------------------------------------------------------------------------------------
    def _positions(self, h: int, w: int, x: torch.Tensor) -> torch.Tensor | None:
        """``[h·w, D]`` position vectors for the token grid, or None."""
        if self.positional == "none":
            return None
        if self.positional == "sinusoidal2d":
            return sinusoidal_2d_table(h, w, self.dim, x.device, x.dtype)
        table = self.pos_table
        if (h, w) != self.grid:
            if not self.interpolate:
                raise ValueError(
                    f"learned2d positional encoding was built for a {self.grid[0]}×{self.grid[1]} token grid, "
                    f"got a {h}×{w} grid; resize the images to the training size, set adapter.grid, or allow "
                    "adapter.interpolate=true"
                )
            table = F.interpolate(table[None], size=(h, w), mode="bilinear", align_corners=False)[0]  # [D, h, w]
        return table.flatten(1).transpose(0, 1).to(x.dtype)  # [h·w, D]

    def export_description(self) -> dict:
        """The pixels the exported model takes; normalisation happens inside it."""
        return {
            "inputs": {
                "images": {"shape": ["B", "C", "H", "W"], "meaning": "RGB pixels, channels first, float32 in [0, 1] "
                           "(byte value / 255), NOT normalised (the model normalises them itself)"},
                "pixel_mask": {"shape": ["B", "H", "W"], "meaning": "True on the image's real pixels, False on "
                               "padding (padded images sit top-left)"},
            },
            "preprocessing": {
                "channels": self.in_channels, "pixel_range": [0.0, 1.0],
                "normalization_inside_the_model": {"kind": self.normalize, "mean": self.mean.tolist(),
                                                   "std": self.std.tolist()},
            },
        }

    def example_inputs(self, batch: int = 2, scale: int = 1) -> dict[str, torch.Tensor]:
        """``images [B, C, H, W]`` (the training size, or 16×16, times ``scale``) and ``pixel_mask``."""
        h, w = ((self.grid[0] * self.patch, self.grid[1] * self.patch) if self.grid is not None else (16, 16))
        h, w = h * scale, w * scale
        g = torch.Generator().manual_seed(0)
        return {"images": torch.rand(batch, self.in_channels, h, w, generator=g),
                "pixel_mask": torch.ones(batch, h, w, dtype=torch.bool)}

    def _positions_per_image(self, real: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``learned2d`` with ``interpolate``: the table resized to each image's own token grid (its real
        rows and columns, top-left in the padded batch grid), so an image gets the same positions in a
        padded batch as alone. ``real [B, h, w]`` -> ``[B, h·w, D]``."""
        b, h, w = real.shape
        rows = real.any(dim=2).sum(dim=1).tolist()  # [B] real token rows of each image
        cols = real.any(dim=1).sum(dim=1).tolist()
        out = x.new_zeros(b, h, w, self.dim)
        for size in sorted(set(zip(rows, cols))):
            if size[0] == 0 or size[1] == 0:
                continue
            table = self._positions(size[0], size[1], x).view(size[0], size[1], self.dim)  # [h_i, w_i, D]
            for i in [i for i, s in enumerate(zip(rows, cols)) if s == size]:
                out[i, : size[0], : size[1]] = table
        return out.view(b, h * w, self.dim)

    def _patch_values(self, images: torch.Tensor, pixel_mask: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor | None, int, int]:
        """Normalised patches: ``images [B, C, H, W]``, ``pixel_mask [B, H, W] | None`` -> ``values [B, L,
        C·p·p]`` (padding pixels 0), ``mask [B, L] | None`` (a patch is real when any of its pixels is),
        ``h``, ``w`` (the token grid, ``L = h·w`` row-major)."""
        if images.dim() != 4:
            raise ValueError(f"images must be [B, C, H, W], got shape {tuple(images.shape)}")
        b, c, height, width = images.shape
        if c != self.in_channels:
            if c != 1:
                raise ValueError(f"images have {c} channels; the adapter expects in_channels={self.in_channels} "
                                 "(or 1 = grayscale, repeated)")
            images = images.expand(b, self.in_channels, height, width)  # grayscale -> C channels
        if not images.is_floating_point():
            raise ValueError(f"images must be float (values in [0, 1]), got dtype {images.dtype}")
        if pixel_mask is not None:
            if pixel_mask.shape != (b, height, width) or pixel_mask.dtype != torch.bool:
                raise ValueError(f"pixel_mask must be bool [B, H, W] = {(b, height, width)}, got "
                                 f"{pixel_mask.dtype} {tuple(pixel_mask.shape)}")
            exporting = torch.compiler.is_exporting() or torch.jit.is_tracing()  # no branch on values there
            if not exporting and bool(pixel_mask.all()):
                pixel_mask = None
        if self.normalize == "image":  # statistics over each image's real pixels only
            real = (torch.ones(b, 1, height, width, dtype=images.dtype, device=images.device) if pixel_mask is None
                    else pixel_mask[:, None].to(images.dtype))  # [B, 1, H, W]
            count = real.sum(dim=(2, 3), keepdim=True).clamp_min(1)  # [B, 1, 1, 1]
            mean = (images * real).sum(dim=(2, 3), keepdim=True) / count  # [B, C, 1, 1]
            var = (((images - mean) * real) ** 2).sum(dim=(2, 3), keepdim=True) / count
            x = (images - mean) / (var + 1e-4).sqrt()  # [B, C, H, W]
        else:
            x = (images - self.mean[None, :, None, None]) / self.std[None, :, None, None]  # [B, C, H, W]
        p = self.patch
        pad_h, pad_w = (-height) % p, (-width) % p
        if pad_h or pad_w:  # sides not a multiple of p: zero-pad, and mask the padding
            if pixel_mask is None:
                pixel_mask = torch.ones(b, height, width, dtype=torch.bool, device=x.device)
            x = F.pad(x, (0, pad_w, 0, pad_h))
            pixel_mask = F.pad(pixel_mask, (0, pad_w, 0, pad_h), value=False)
        if pixel_mask is not None:
            x = x * pixel_mask[:, None].to(x.dtype)  # padded pixels are 0 after normalisation
        h, w = (height + pad_h) // p, (width + pad_w) // p
        # [B, C, h·p, w·p] -> [B, C, h, p, w, p] -> [B, h, w, C, p, p] -> [B, h·w, C·p·p]
        x = x.reshape(b, self.in_channels, h, p, w, p).permute(0, 2, 4, 1, 3, 5).reshape(b, h * w, -1)
        mask = None
        if pixel_mask is not None:
            # a patch is real when any of its pixels is real
            mask = pixel_mask.reshape(b, h, p, w, p).any(dim=4).any(dim=2).reshape(b, h * w)  # [B, L]
        return x, mask, h, w

    def _position_rows(self, mask: torch.Tensor | None, h: int, w: int, x: torch.Tensor) -> torch.Tensor | None:
        """The 2-D position vectors added to the tokens: ``[B, L, D]`` or ``[1, L, D]``, or None."""
        b = x.shape[0]
        exporting = torch.compiler.is_exporting() or torch.jit.is_tracing()
        if self.positional == "learned2d" and self.interpolate and mask is not None and not exporting:
            return self._positions_per_image(mask.view(b, h, w), x)  # [B, L, D]: each image its own grid
        pos = self._positions(h, w, x)
        return None if pos is None else pos.unsqueeze(0)  # [1, L, D]

    def forward(self, images: torch.Tensor, pixel_mask: torch.Tensor | None = None) -> Tokens:
        """``images [B, C, H, W]`` (C = in_channels, or 1 = grayscale), ``pixel_mask [B, H, W]`` bool
        (True = real pixel; None = all real) -> Tokens ``x [B, h·w, D]`` (see the class docstring)."""
        values, mask, h, w = self._patch_values(images, pixel_mask)  # [B, L, C·p·p], [B, L] | None
        x = self.proj(values)  # [B, L, D]
        pos = self._position_rows(mask, h, w, x)
        if pos is not None:
            x = x + pos  # [B, L, D]
        x = self.drop(x)
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        # the window is described, not materialised: the encoder plans a blocked kernel for it
        return Tokens(x=x, mask=mask, grid=(h, w), grid_window=self.window, extra={"patch_size": self.patch})

    # -- masked-patch pretraining (seqattn.objectives.masked) -------------------------------
    def token_target_layout(self) -> TargetLayout:
        """Masked-patch pretraining regresses each hidden patch's pixels: ``("regression", C·p·p)``."""
        return TargetLayout("regression", self.in_channels * self.patch**2)

    def token_targets(self, batch) -> TokenTargets:
        """Each patch's pixels as the adapter normalises them (``normalize``: fixed mean/std or per image),
        from the clean batch: ``values [B, L, C·p·p]`` (the projection's own input; raw pixels up to an
        affine map, not per-patch normalised: a flat background patch would become its noise), maskable
        on real patches (``maskable [B, L]``; padding patches never)."""
        if not isinstance(batch.get("images"), torch.Tensor):
            raise ValueError(f"{type(self).__name__}.token_targets needs images [B, C, H, W] (and pixel_mask); the "
                             f"batch has {sorted(batch)}")
        with torch.no_grad():
            values, mask, _, _ = self._patch_values(batch["images"], batch.get("pixel_mask"))
        if mask is None:
            mask = torch.ones(values.shape[:2], dtype=torch.bool, device=values.device)
        return TokenTargets("regression", values.float(), mask, self.in_channels * self.patch**2)

    def mask_tokens(self, tokens: Tokens, hide: torch.Tensor, vector: torch.Tensor) -> Tokens:
        """``tokens`` with each hidden patch's vector replaced by ``vector [D]`` **plus its 2-D position**
        (the adapter adds positions itself; the encoder adds none), so the model knows where the patch
        it must restore is. ``hide [B, L]`` bool."""
        x = tokens.x  # [B, L, D]
        if hide.shape != x.shape[:2]:
            raise ValueError(f"hide must be [B, L] = {tuple(x.shape[:2])}, got {tuple(hide.shape)}")
        if tokens.grid is None:
            raise ValueError("ImageAdapter.mask_tokens needs the tokens' grid (h, w), as the adapter returns it")
        h, w = tokens.grid
        filler = vector.to(x.dtype).expand_as(x)  # [B, L, D]
        pos = self._position_rows(tokens.mask, h, w, x)
        if pos is not None:
            filler = filler + pos
        return tokens.replace(x=torch.where(hide.unsqueeze(-1), filler, x))
