"""Personalised-PageRank propagation of token vectors over the attention graph (APPNP's output step).

Letters: b batch, l length, d width, e edges (over the flattened batch ``b * L + l``).

``z_0 = x``, ``z_{t+1} = (1 - alpha) Â z_t + alpha x``, ``t < steps``, with ``Â = D^-1/2 A D^-1/2`` the
symmetrically normalised adjacency of ``edge_index`` plus a self-loop on every real token that lacks
one (Klicpera et al. 2019, "Predict then propagate"). ``alpha`` is the teleport (restart)
probability: each token keeps that share of its own vector, so many steps do not wash it out. Used
by :class:`~seqattn.core.encoder.Encoder` (``output_propagation``) after its last layer: with a linear
head this propagates the predictions, which lets few labelled tokens label the graph around them.
"""

from __future__ import annotations

import warnings

import torch

from seqattn.core.checks import tracing
from seqattn.core.structure_cache import TensorMemo


#: on CUDA, the sparse product from this many edges (below it the gather and add, as fast there)
CUDA_SPARSE_EDGES = 1 << 20


class GraphOperator:
    """``Â h`` for ``h [T, C]``: the weighted adjacency ``(target, source) -> weight`` over ``T`` flattened tokens,
    applied as a sparse matrix product (messages flow source -> target; repeated edges add up).

    Built once per forward (``src, dst [E]``, ``weight [E]``), applied as often as needed. On CPU and CUDA at
    float32 / float64 (on CUDA for large graphs: :meth:`sparse`) it is a CSR matrix product with its own backward
    (``Âᵀ g``, the transpose built with it).
    Against gathering the source rows, weighting them and adding them into the targets, ten PPR steps at width 64,
    forward + backward, operator built inside (``python -m seqattn.bench core --cells propagation``, 1 thread):
    karate's size 0.74x the time, Cora's 0.33x (10.9 vs 33.2 ms; peak 13 vs 69 MB), PubMed's 0.23x. Elsewhere
    (other dtypes or devices, inside ``torch.compile`` / export / a jit trace) it is that gather and add, the same
    sums in another order. ``weight`` gets no gradient (it is structure)."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor, num_tokens: int) -> None:
        self.src, self.dst, self.weight, self.num_tokens = src, dst, weight, int(num_tokens)
        self._csr: tuple[torch.Tensor, torch.Tensor] | None = None

    def sparse(self, dtype: torch.dtype, device: torch.device) -> bool:
        """Whether ``h`` of this dtype and device takes the sparse product: CPU at fp32 / fp64; CUDA from
        :data:`CUDA_SPARSE_EDGES` edges (an H200, ten steps fwd + bwd at width 64: 10.5k and 88k edges, gathered
        3.8 / 3.9 ms against sparse 4.3 / 4.4 ms, launch-bound either way; 4M edges 111 vs 12 ms)."""
        if dtype not in (torch.float32, torch.float64) or tracing():
            return False
        return device.type == "cpu" or (device.type == "cuda" and self.src.numel() >= CUDA_SPARSE_EDGES)

    def matrices(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Â, Âᵀ)`` as CSR ``[T, T]`` matrices (rows = targets of ``Â``), built on first use."""
        if self._csr is None or self._csr[0].dtype != dtype:
            self._csr = (_csr(self.dst, self.src, self.weight.to(dtype), self.num_tokens),
                         _csr(self.src, self.dst, self.weight.to(dtype), self.num_tokens))
        return self._csr

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """``h [T, C]`` -> ``Â h [T, C]``."""
        return self.add_product(None, h)

    def add_product(self, base: torch.Tensor | None, h: torch.Tensor, beta: float = 1.0,
                    alpha: float = 1.0) -> torch.Tensor:
        """``beta · base + alpha · Â h`` (``base``, ``h``: ``[T, C]``; ``base`` None: ``alpha · Â h``), one fused
        product on the sparse path."""
        if self.sparse(h.dtype, h.device) and (base is None or base.dtype == h.dtype):
            a, at = self.matrices(h.dtype)
            if torch.is_grad_enabled() and (h.requires_grad or (base is not None and base.requires_grad)):
                return _AddProduct.apply(base, h, a, at, float(beta), float(alpha))
            return _product(base, a, h, beta, alpha)
        out = self._gathered(h)
        out = out if alpha == 1.0 else alpha * out
        return out if base is None else beta * base + out

    def _gathered(self, h: torch.Tensor) -> torch.Tensor:
        """``Â h`` by gathering the source rows, weighting them and adding them into the targets."""
        return torch.zeros_like(h).index_add_(0, self.dst, h.index_select(0, self.src) * self.weight.to(h.dtype)[:, None])


def _csr(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    """A CSR ``[n, n]`` matrix with ``values [E]`` at ``(rows, cols)``, entries ordered by row then column."""
    order = torch.argsort(rows * n + cols)
    crow = torch.zeros(n + 1, dtype=torch.int64, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=n).cumsum(0)
    with warnings.catch_warnings():  # torch's "CSR support is in beta" (the product used here is long-standing)
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, cols[order], values[order], (n, n), check_invariants=False)


def _product(base: torch.Tensor | None, a: torch.Tensor, h: torch.Tensor, beta: float, alpha: float) -> torch.Tensor:
    """``beta · base + alpha · a h`` (``base`` None: ``alpha · a h``) at ``h``'s precision: autocast (bf16-mixed) would
    cast the operands of ``addmm`` to bf16, which the CSR product does not take; the sums stay fp32 here."""
    with torch.autocast(h.device.type, enabled=False):
        if base is None:
            out = a @ h
            return out.mul_(alpha) if alpha != 1.0 else out
        return torch.addmm(base, a, h, beta=beta, alpha=alpha)


class _AddProduct(torch.autograd.Function):
    """``beta · base + alpha · Â h`` (``base`` may be None: ``alpha · Â h``) with the gradients ``beta · g`` for
    ``base`` and ``alpha · Âᵀ g`` for ``h`` (``Â``, ``Âᵀ``: CSR matrices built together)."""

    @staticmethod
    def forward(ctx, base, h, a, at, beta, alpha):
        ctx.at, ctx.beta, ctx.alpha = at, beta, alpha
        return _product(base, a, h, beta, alpha)

    @staticmethod
    def backward(ctx, grad):
        grad_base = grad_h = None
        if ctx.needs_input_grad[0]:
            grad_base = grad * ctx.beta if ctx.beta != 1.0 else grad
        if ctx.needs_input_grad[1]:
            grad_h = _product(None, ctx.at, grad.contiguous(), 0.0, ctx.alpha)
        return grad_base, grad_h, None, None, None, None


#: the operators of the last few graphs: a full-graph run builds the same one at every forward (see gcn_operator)
GCN_OPERATORS = TensorMemo()


def gcn_operator(mask: torch.Tensor, edge_index: torch.Tensor, dtype: torch.dtype, drop_self_loops: bool = False
                 ) -> GraphOperator:
    """``Â = D^-1/2 (A + I) D^-1/2`` over ``edge_index [2, E]`` (flattened ``b * N + i``, messages source ->
    target) plus one self-loop per real token of ``mask [B, N]`` (``D``: in-degrees with it). Edges touching
    padding are left out and padding rows stay zero. ``drop_self_loops``: self-loops already among the edges are
    dropped first, so each real token has exactly one (else they are counted again).

    Remembered for the same ``mask`` and ``edge_index`` objects, unchanged since (:data:`GCN_OPERATORS`, a
    :class:`~seqattn.core.structure_cache.TensorMemo`), with the CSR matrices the operator builds on first use:
    a full-graph run (Cora) built them at every forward, ~1.4 ms each time."""
    return GCN_OPERATORS((mask, edge_index), (dtype, bool(drop_self_loops)),
                         lambda: _gcn_operator(mask, edge_index, dtype, drop_self_loops))


def _gcn_operator(mask: torch.Tensor, edge_index: torch.Tensor, dtype: torch.dtype, drop_self_loops: bool
                  ) -> GraphOperator:
    n_total = mask.numel()
    real = mask.reshape(-1)
    src, dst = edge_index[0], edge_index[1]
    keep = real[src] & real[dst]
    if drop_self_loops:
        keep = keep & (src != dst)
    nodes = torch.nonzero(real).squeeze(1)  # [R]
    src = torch.cat([src[keep], nodes])
    dst = torch.cat([dst[keep], nodes])
    deg = torch.zeros(n_total, dtype=dtype, device=mask.device).index_add_(0, dst, torch.ones_like(dst, dtype=dtype))
    weight = (deg[src] * deg[dst]).clamp_min(1.0).rsqrt()  # [E' + R]
    return GraphOperator(src, dst, weight, n_total)


def ppr_propagate(x: torch.Tensor, edge_index: torch.Tensor, mask: torch.Tensor | None, steps: int,
                  alpha: float) -> torch.Tensor:
    """``x [B, L, D]`` -> ``[B, L, D]``: ``steps`` personalised-PageRank steps over ``edge_index [2, E]``
    (source -> target over flattened ``b * L + l``; messages flow to the target), ``mask [B, L]`` bool
    (True = real token; padding rows stay as they are and send nothing). ``steps = 0`` returns ``x``."""
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1] (the teleport probability), got {alpha!r}")
    if steps == 0:
        return x
    b, l, d = x.shape
    n_total = b * l
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    real = torch.ones(n_total, dtype=torch.bool, device=x.device) if mask is None else mask.reshape(-1)
    step = gcn_operator(real.view(b, l) if mask is None else mask, edge_index, x.dtype, drop_self_loops=True)
    flat = x.reshape(n_total, d)
    z = flat
    for _ in range(steps):
        z = step.add_product(flat, z, beta=alpha, alpha=1.0 - alpha)  # alpha x + (1 - alpha) Â z
    if mask is not None:
        z = torch.where(real.unsqueeze(1), z, flat)  # padding rows unchanged
    return z.reshape(b, l, d)
