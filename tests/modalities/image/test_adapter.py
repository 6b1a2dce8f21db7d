"""ImageAdapter: tokens per pixel / patch, 2-D positions, local windows, padding invariance."""

import pytest
import torch

from seqattn.modalities.image.adapter import ImageAdapter, sinusoidal_2d_table
from seqattn.core import Encoder
from seqattn.core.masks import grid_window_mask, structure_mask
from seqattn.model.heads import PooledHead
from seqattn.model.network import SequenceModel


def _model(dim=16, pooling="mean", encoder=None, **adapter_kwargs):
    adapter = ImageAdapter(dim, **adapter_kwargs)
    encoder = encoder or Encoder(dim, depth=2, heads=2, dropout=0.0, positional="none")
    return SequenceModel(adapter, encoder, PooledHead(dim, 3, pooling=pooling, dropout=0.0)).eval()


def test_pixels_become_hw_tokens_of_three_values():
    adapter = ImageAdapter(8, positional="none", mean=None, std=None)
    images = torch.rand(2, 3, 5, 10)  # the seed's 5×10 RGB image
    tokens = adapter(images)
    assert tokens.x.shape == (2, 50, 8) and tokens.mask is None and tokens.grid == (5, 10)
    # token r*W + c is the projection of pixel (r, c)'s three channel values
    expected = adapter.proj(images[1, :, 3, 7])
    torch.testing.assert_close(tokens.x[1, 3 * 10 + 7], expected)


def test_patches_are_p_by_p_by_3_vectors():
    adapter = ImageAdapter(8, mode="patches", patch_size=4, positional="none", mean=None, std=None)
    images = torch.rand(1, 3, 8, 12)
    tokens = adapter(images)
    assert tokens.x.shape == (1, 6, 8) and tokens.grid == (2, 3)
    patch = images[0, :, 4:8, 8:12].reshape(-1)  # patch (1, 2) as C·p·p values, channel-major
    torch.testing.assert_close(tokens.x[0, 1 * 3 + 2], adapter.proj(patch))


def test_grayscale_is_expanded_to_three_channels():
    adapter = ImageAdapter(8)
    gray = torch.rand(2, 1, 4, 4)
    torch.testing.assert_close(adapter(gray).x, adapter(gray.expand(2, 3, 4, 4)).x)
    with pytest.raises(ValueError, match="2 channels"):
        adapter(torch.rand(2, 2, 4, 4))


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="mode"):
        ImageAdapter(8, mode="voxels")
    with pytest.raises(ValueError, match="positional"):
        ImageAdapter(8, positional="sinusoidal")
    with pytest.raises(ValueError, match="odd"):
        ImageAdapter(8, window=4)
    with pytest.raises(ValueError, match="normalize"):
        ImageAdapter(8, normalize="batch")
    with pytest.raises(ValueError, match="divisible by 4"):
        ImageAdapter(6)
    with pytest.raises(ValueError, match="grid"):
        ImageAdapter(8, positional="learned2d")
    with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
        ImageAdapter(8)(torch.rand(3, 4, 4))


def test_per_image_normalisation_ignores_colour_offsets_and_padding():
    adapter = ImageAdapter(8, normalize="image", positional="none")
    images = torch.rand(1, 3, 5, 5)
    shifted = images * 0.5 + torch.tensor([0.3, 0.1, 0.2])[None, :, None, None]  # another colour, less contrast
    torch.testing.assert_close(adapter(images).x, adapter(shifted).x, atol=2e-3, rtol=1e-3)
    # padding: the statistics are over real pixels only, whatever the padding holds
    padded = torch.full((1, 3, 7, 7), 9.0)
    padded[:, :, :5, :5] = images
    pixel_mask = torch.zeros(1, 7, 7, dtype=torch.bool)
    pixel_mask[:, :5, :5] = True
    tokens = adapter(padded, pixel_mask)
    real = tokens.x[0].view(7, 7, 8)[:5, :5].reshape(25, 8)
    torch.testing.assert_close(real, adapter(images).x[0], atol=1e-5, rtol=1e-5)
    assert not tokens.x[0].view(7, 7, 8)[5:].any()


def test_sinusoidal_2d_table_splits_rows_and_columns():
    table = sinusoidal_2d_table(3, 4, 8).view(3, 4, 8)
    assert torch.equal(table[1, 0, :4], table[1, 3, :4])  # same row -> same row half
    assert torch.equal(table[0, 2, 4:], table[2, 2, 4:])  # same column -> same column half
    assert not torch.equal(table[0, 0], table[0, 1])


def test_window_gives_the_grid_mask_and_restricts_the_receptive_field():
    model = _model(window=3, encoder=Encoder(16, depth=1, heads=2, dropout=0.0, positional="none"))
    images = torch.rand(1, 3, 6, 6)
    tokens = model.adapter(images)
    assert tokens.attn_mask is None and tokens.grid_window == 3  # described, not an [L, L] mask
    assert torch.equal(structure_mask(36, grid=tokens.grid, grid_window=3), grid_window_mask(6, 6, 3))
    changed = images.clone()
    changed[0, :, 0, 0] = torch.rand(3)  # one corner pixel
    a, b = (model.encoder(model.adapter(x)) for x in (images, changed))
    moved = ((a - b).abs().sum(-1)[0] > 1e-6).view(6, 6)
    expected = torch.zeros(6, 6, dtype=torch.bool)
    expected[:2, :2] = True  # one layer: only the corner's 3×3 neighbourhood sees it
    assert torch.equal(moved, expected)


def _tokens_on_grid(out, grid, size):
    """Encoder output [1, h·w, D] on a padded grid -> the real (h, w) block, flattened."""
    h, w = grid
    real_h, real_w = size
    return out.view(1, h, w, -1)[:, :real_h, :real_w].reshape(1, real_h * real_w, -1)


@pytest.mark.parametrize("kwargs", [
    {"positional": "sinusoidal2d"},
    {"positional": "sinusoidal2d", "window": 3},
    {"positional": "none", "pooling": "attention"},
    {"positional": "sinusoidal2d", "pooling": "cls"},
    {"positional": "sinusoidal2d", "mode": "patches", "patch_size": 2},
    {"positional": "sinusoidal2d", "mode": "patches", "patch_size": 3, "normalize": "image"},
])
def test_padded_mixed_size_batch_equals_each_image_alone(kwargs):
    pooling = kwargs.pop("pooling", "mean")
    model = _model(pooling=pooling, **kwargs)
    sizes = [(7, 5), (4, 8), (8, 8)] if kwargs.get("patch_size") != 3 else [(7, 5), (4, 8), (9, 9)]
    alone = [torch.rand(1, 3, h, w) for h, w in sizes]
    side = max(max(s) for s in sizes)
    batch = torch.zeros(3, 3, side, side)
    pixel_mask = torch.zeros(3, side, side, dtype=torch.bool)
    for i, (img, (h, w)) in enumerate(zip(alone, sizes)):
        batch[i, :, :h, :w] = img[0]
        batch[i, :, h:, :] = torch.rand(3, side - h, side)  # garbage in the padding must not matter
        pixel_mask[i, :h, :w] = True
    with torch.no_grad():
        batched = model({"images": batch, "pixel_mask": pixel_mask})["logits"]
        single = torch.cat([model({"images": img, "pixel_mask": None})["logits"] for img in alone])
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)
    if pooling == "mean":  # also token by token on the real pixels / patches
        p = kwargs.get("patch_size", 1)
        tokens = model.adapter(batch, pixel_mask)
        enc = model.encoder(tokens)
        for i, (img, (h, w)) in enumerate(zip(alone, sizes)):
            t_alone = model.adapter(img)
            real = (-(-h // p), -(-w // p))
            torch.testing.assert_close(_tokens_on_grid(enc[i:i + 1], tokens.grid, real),
                                       model.encoder(t_alone), atol=1e-5, rtol=1e-5)


def test_2d_positions_make_the_model_sensitive_to_pixel_order():
    torch.manual_seed(1)
    images = torch.rand(2, 3, 6, 6)
    perm = torch.randperm(36)
    shuffled = images.flatten(2)[:, :, perm].view(2, 3, 6, 6)  # the same pixels, moved

    without = _model(positional="none")
    with torch.no_grad():
        tokens = without.adapter(images)
        out = without.encoder(tokens)
        out_shuffled = without.encoder(without.adapter(shuffled))
        # no position: the encoder is permutation-equivariant, the pooled prediction invariant
        torch.testing.assert_close(out_shuffled, out[:, perm], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(without({"images": shuffled, "pixel_mask": None})["logits"],
                                   without({"images": images, "pixel_mask": None})["logits"], atol=1e-5, rtol=1e-5)

    for positional in ("sinusoidal2d", "learned2d"):
        model = _model(positional=positional, grid=(6, 6))
        model.adapter.proj.load_state_dict(without.adapter.proj.state_dict())
        model.encoder.load_state_dict(without.encoder.state_dict())
        model.head.load_state_dict(without.head.state_dict())
        with torch.no_grad():
            out = model.encoder(model.adapter(images))
            out_shuffled = model.encoder(model.adapter(shuffled))
            logits = model({"images": images, "pixel_mask": None})["logits"]
            logits_shuffled = model({"images": shuffled, "pixel_mask": None})["logits"]
        assert (out_shuffled - out[:, perm]).abs().max() > 1e-3, positional
        assert (logits_shuffled - logits).abs().max() > 1e-4, positional


def test_learned_2d_grid_mismatch_is_a_clear_error_or_interpolated_on_request():
    adapter = ImageAdapter(8, positional="learned2d", image_size=16, mode="patches", patch_size=4)
    assert adapter.grid == (4, 4)
    assert adapter(torch.rand(1, 3, 16, 16)).x.shape == (1, 16, 8)
    with pytest.raises(ValueError, match=r"4×4 token grid.*6×5 grid"):
        adapter(torch.rand(1, 3, 24, 20))
    adapter.interpolate = True
    tokens = adapter(torch.rand(1, 3, 24, 20))
    assert tokens.x.shape == (1, 30, 8) and tokens.grid == (6, 5)
    # interpolation really runs: the 6×5 grid's positions are the bilinearly resized table
    table = torch.nn.functional.interpolate(adapter.pos_table[None], size=(6, 5), mode="bilinear",
                                            align_corners=False)[0].flatten(1).t()  # [30, D]
    no_pos = ImageAdapter(8, positional="none", mode="patches", patch_size=4)
    no_pos.load_state_dict({k: v for k, v in adapter.state_dict().items() if k != "pos_table"})
    image = torch.rand(1, 3, 24, 20)
    torch.testing.assert_close(adapter(image).x - no_pos(image).x, table[None])


def test_learned_2d_interpolation_keeps_a_padded_batch_equal_to_each_image_alone():
    """resize=none batches of different sizes: each image gets the table resized to its own grid."""
    adapter = ImageAdapter(8, positional="learned2d", grid=(8, 8), interpolate=True).eval()
    sizes = [(5, 6), (8, 8), (3, 7)]
    g = torch.Generator().manual_seed(0)
    images = [torch.rand(3, h, w, generator=g) for h, w in sizes]
    batch = torch.zeros(len(sizes), 3, 8, 8)
    pixel_mask = torch.zeros(len(sizes), 8, 8, dtype=torch.bool)
    for i, (img, (h, w)) in enumerate(zip(images, sizes)):
        batch[i, :, :h, :w] = img
        pixel_mask[i, :h, :w] = True
    together = adapter(batch, pixel_mask)
    for i, (img, (h, w)) in enumerate(zip(images, sizes)):
        alone = adapter(img[None]).x[0]  # [h·w, D]
        grid = together.x[i].view(8, 8, 8)[:h, :w].reshape(h * w, 8)
        torch.testing.assert_close(grid, alone, msg=f"image {i} of size {(h, w)}")
    # the image of the training grid gets the table itself (interpolation to the same size is the identity)
    no_pos = ImageAdapter(8, positional="none").eval()
    no_pos.load_state_dict({k: v for k, v in adapter.state_dict().items() if k != "pos_table"})
    torch.testing.assert_close(together.x[1] - no_pos(batch, pixel_mask).x[1], adapter.pos_table.flatten(1).t())


def test_gradients_reach_the_learned_positions():
    adapter = ImageAdapter(8, positional="learned2d", grid=(4, 4))
    adapter(torch.rand(2, 3, 4, 4)).x.sum().backward()
    assert adapter.pos_table.grad is not None and adapter.pos_table.grad.abs().sum() > 0


def test_sinusoidal_2d_table_is_the_1d_formula_of_the_row_then_of_the_column():
    """Channel ``c < D/2``: the 1-D rule of width ``D/2`` at the row index; ``c >= D/2``: at the column
    index: ``sin(p / 10000^(2i/(D/2)))`` at ``2i``, ``cos`` at ``2i + 1`` -- written out here."""
    import math

    height, width, dim = 5, 7, 16
    table = sinusoidal_2d_table(height, width, dim, dtype=torch.float64).view(height, width, dim)
    half = dim // 2

    def one_d(p, c):
        angle = p / 10000 ** (2 * (c // 2) / half)
        return math.sin(angle) if c % 2 == 0 else math.cos(angle)

    want = torch.tensor([[[one_d(r, c) for c in range(half)] + [one_d(col, c) for c in range(half)]
                          for col in range(width)] for r in range(height)], dtype=torch.float64)
    torch.testing.assert_close(table, want, atol=1e-12, rtol=0)


def _normalised_pixels(adapter: ImageAdapter, images: torch.Tensor, pixel_mask=None) -> torch.Tensor:
    """The adapter's normalised pixels ``[B, H·W, C]``: its projection replaced by the identity."""
    adapter.proj = torch.nn.Identity()
    return adapter(images, pixel_mask).x


def test_fixed_normalisation_uses_the_configured_mean_and_std_per_channel():
    images = torch.tensor([0.0, 0.5, 1.0]).view(1, 3, 1, 1).expand(1, 3, 1, 2).clone()  # R=0, G=0.5, B=1
    default = _normalised_pixels(ImageAdapter(8, mode="pixels", positional="none"), images)
    torch.testing.assert_close(default[0, 0], torch.tensor([-2.0, 0.0, 2.0]))  # (x - 0.5) / 0.25
    custom = ImageAdapter(8, mode="pixels", positional="none", mean=[0.2, 0.4, 0.6], std=[0.1, 0.2, 0.4])
    torch.testing.assert_close(_normalised_pixels(custom, images)[0, 1], torch.tensor([-2.0, 0.5, 1.0]))


def test_per_image_normalisation_is_each_channels_mean_and_population_std():
    # channel 0 of one 2x2 image: 0, 0.2, 0.4, 0.6 -> mean 0.3, variance 0.05; channel 1 constant 0.7
    images = torch.zeros(1, 3, 2, 2)
    images[0, 0] = torch.tensor([[0.0, 0.2], [0.4, 0.6]])
    images[0, 1] = 0.7
    x = _normalised_pixels(ImageAdapter(8, mode="pixels", positional="none", normalize="image"), images)
    want = (torch.tensor([0.0, 0.2, 0.4, 0.6]) - 0.3) / (0.05 + 1e-4) ** 0.5
    torch.testing.assert_close(x[0, :, 0], want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x[0, :, 1], torch.zeros(4))  # constant: 0, not NaN


def test_token_targets_are_the_normalised_patch_pixels_and_padding_patches_are_never_maskable():
    adapter = ImageAdapter(16, mode="patches", patch_size=2, mean=[0.5] * 3, std=[0.25] * 3)
    images = torch.rand(2, 3, 6, 6)
    pixel_mask = torch.ones(2, 6, 6, dtype=torch.bool)
    pixel_mask[1, 4:, :] = False  # the second image is 4×6: its bottom row of patches is padding
    images[1, :, 4:, :] = 0.0
    layout = adapter.token_target_layout()
    assert (layout.kind, layout.size) == ("regression", 12)
    targets = adapter.token_targets({"images": images, "pixel_mask": pixel_mask})
    assert targets.values.shape == (2, 9, 12) and targets.layout == layout
    # patch (r, c) = 1 * 3 + 2: its 3×2×2 pixels, channel first, as the adapter normalises them
    patch = (images[0, :, 2:4, 4:6] - 0.5) / 0.25
    torch.testing.assert_close(targets.values[0, 5], patch.reshape(-1))
    assert targets.maskable[0].all() and targets.maskable[1].tolist() == [True] * 6 + [False] * 3
    tokens = adapter(images, pixel_mask)
    assert torch.equal(tokens.mask, targets.maskable)


@pytest.mark.parametrize("positional", ["sinusoidal2d", "learned2d"])
def test_a_hidden_patch_keeps_its_2d_position(positional):
    adapter = ImageAdapter(16, mode="patches", patch_size=2, positional=positional, image_size=8).eval()
    images = torch.rand(2, 3, 8, 8)
    tokens = adapter(images)
    hide = torch.zeros(2, 16, dtype=torch.bool)
    hide[0, [1, 6]] = True
    hide[1, 6] = True
    vector = torch.randn(16)
    hidden = adapter.mask_tokens(tokens, hide, vector)
    positions = adapter._positions(4, 4, tokens.x)  # [16, D]: what forward adds to each patch
    for b, l in ((0, 1), (0, 6), (1, 6)):
        torch.testing.assert_close(hidden.x[b, l], vector + positions[l])  # mask vector + its own position
    assert not torch.allclose(hidden.x[0, 1], hidden.x[0, 6])  # two hidden patches stay distinguishable
    torch.testing.assert_close(hidden.x[~hide], tokens.x[~hide], rtol=0, atol=0)  # the others untouched
    assert hidden.grid == tokens.grid
