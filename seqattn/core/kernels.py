"""Attention kernels behind one function.

Letters: b batch, h heads, l query length, s key length, d head width (q/k),
e head width of v, n flattened positions (b * l), E edges.

Kernels (all take ``q [B, H, L, D]``, ``k [B, H, S, D]``, ``v [B, H, S, E]``):

- ``math``: the textbook reference, ``softmax(q kᵀ · scale + mask) v``; can return weights.
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (fused, default).
- ``linear``: ``φ(q) (φ(k)ᵀ v) / (φ(q) Σ φ(k))`` with ``φ = elu + 1``
  (Katharopoulos et al. 2020, "Transformers are RNNs"); O(L) time and memory; only
  a padding mask is meaningful.
- ``edge``: softmax over the incoming edges of each node of an ``edge_index``; O(E)
  memory, for graphs too large for a dense ``[L, L]`` score matrix.

Per-pair key and value offsets (graph edge features, PyG ``TransformerConv(edge_dim=...)``):
``edge_key`` / ``edge_value`` are added to the key and the value of source ``s`` as seen by query
``l``: ``score = q_l · (k_s + ek_ls)``, ``out_l = Σ_s a_ls (v_s + ev_ls)``. The ``edge`` kernel takes
them per edge (``[E, H, D]``, ``[E, H, E_v]``), ``math`` dense (``[B, H, L, S, D]``,
``[B, H, L, S, E_v]``; zeros where there is no pair); ``sdpa`` hands them to ``math``.

``math``, ``sdpa`` and ``edge`` are exact and agree given the same mask / graph.
A query row with nothing to attend to yields zeros (never NaN), forward and backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from seqattn.core import dropout as fast_dropout
from seqattn.core.checks import debug_checks
from seqattn.core.dropout import dropout
from seqattn.core.masks import additive_mask, dead_rows, revive_dead_rows

KERNELS = ("math", "sdpa", "linear", "edge")


def check_kernel(kernel: str) -> str:
    if kernel not in KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; expected one of {KERNELS}")
    return kernel


def math_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    edge_key: torch.Tensor | None = None,
    edge_value: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference kernel. Returns ``(out [B, H, L, E], weights [B, H, L, S])``.

    ``edge_key [B, H, L, S, D]`` / ``edge_value [B, H, L, S, E]``: optional per-pair offsets of the
    keys and values (see the module docstring)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1))  # [B, H, L, S]
    if edge_key is not None:
        scores = scores + torch.einsum("bhld,bhlsd->bhls", q, edge_key.to(q.dtype))  # q_l · ek_ls
    scores = scores * scale
    dead = None
    if attn_mask is not None:
        dead = dead_rows(attn_mask)  # [.., L, 1]
        attn_mask = revive_dead_rows(attn_mask, dead)
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(scores.dtype)  # a float32 bias under bf16 autocast: the scores' dtype
    weights = torch.softmax(scores, dim=-1)  # [B, H, L, S]
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)
    dropped = dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(dropped, v)  # [B, H, L, E]
    if edge_value is not None:
        out = out + torch.einsum("bhls,bhlse->bhle", dropped, edge_value.to(dropped.dtype))  # Σ_s a_ls ev_ls
    return out, weights  # [B, H, L, E], [B, H, L, S]


def takes_cpu_dropout(q: torch.Tensor, dropout_p: float) -> bool:
    """Whether a training call with attention-weight dropout ``dropout_p`` goes through
    :func:`cpu_dropout_attention` (CPU, dropout on, ``fast_dropout`` on) rather than SDPA's own dropout."""
    return dropout_p > 0.0 and q.device.type == "cpu" and fast_dropout.ENABLED


def cpu_dropout_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention with dropout on its weights, for CPU training: ``q, k [B, H, L, D]``, ``v [B, H, S, E]``,
    ``attn_mask`` bool (True = may attend) or additive, broadcastable to ``[B, H, L, S]`` -> ``[B, H, L, E]``.

    The fused CPU kernel has no dropout, so ``F.scaled_dot_product_attention`` with ``dropout_p > 0`` runs
    torch's math path and draws its mask with ``bernoulli_``; here the weights are dropped with
    :func:`seqattn.core.dropout.dropout`'s cheap masks (one attention call ``[64, 4, 32, 16]`` with a padding
    mask, forward + backward, one thread: 2.2-2.8 ms against SDPA's 3.9-4.2 ms). Equal to
    :func:`math_attention` with the same draws, up to rounding; a mask with a fully masked query row goes
    through it.

    Every pass over ``[B, H, L, S]`` that can move to a smaller tensor does: the scale multiplies ``q``
    ``[B, H, L, D]``, the mask is added in place, the weights are multiplied by the 0/1 keep bits and the
    dropout's scale multiplies the output ``[B, H, L, E]`` (``[64, 4, 98, 16]`` with a padding mask, forward +
    backward, one thread, alternated with the earlier form that scaled the scores and the weights in one process,
    medians of 6 x 20 calls: 40.8 ms against 45.6 ms, 0.90x; docs/benchmarks.md)."""
    if attn_mask is not None:
        if bool(dead_rows(attn_mask).any()):  # rows with no key: the reference kernel keeps them finite
            return math_attention(q, k, v, attn_mask, dropout_p, scale)[0]
        if attn_mask.dtype == torch.bool:  # [.., L|1, S]: added once instead of a masked_fill of the scores
            attn_mask = additive_mask(attn_mask, q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(q * scale, k.transpose(-2, -1))  # [B, H, L, S]
    if attn_mask is not None:
        scores = scores.add_(attn_mask.to(scores.dtype))  # the product is not saved for backward: in place
    weights = torch.softmax(scores, dim=-1)  # [B, H, L, S]
    if dropout_p == 0.0 or dropout_p == 1.0 or not fast_dropout.fast_path(weights):
        return torch.matmul(dropout(weights, dropout_p), v)  # [B, H, L, E]
    keep, keep_scale = fast_dropout.keep_bits(weights.shape, dropout_p, weights.device)
    return torch.matmul(weights * keep, v).mul_(keep_scale)  # [B, H, L, E]


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """Fused kernel (``F.scaled_dot_product_attention``). Returns ``[B, H, L, E]``."""
    dead = None
    if attn_mask is not None:
        # no host synchronisation: dead rows are revived and zeroed whether or not there are any
        dead = dead_rows(attn_mask)  # [.., L, 1]; [B, 1, 1, 1] for a padding mask
        attn_mask = revive_dead_rows(attn_mask, dead)
        if attn_mask.dtype != torch.bool and attn_mask.dtype != q.dtype:
            attn_mask = attn_mask.to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    if dead is not None:
        out = out.masked_fill(dead, 0.0)
    return out  # [B, H, L, E]


def _elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


def _linear_key_mask(attn_mask: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor | None:
    """The linear kernel accepts only a bool padding mask ``[B, 1, 1, S]`` -> ``[B, 1, S, 1]``."""
    if attn_mask is None:
        return None
    if attn_mask.dtype != torch.bool or attn_mask.dim() != 4 or attn_mask.shape[1] != 1 or attn_mask.shape[2] != 1:
        raise ValueError(
            "the 'linear' kernel supports only a bool padding mask (broadcastable [B, 1, 1, S]); "
            f"got {attn_mask.dtype} of shape {tuple(attn_mask.shape)}. Use kernel='sdpa' for structure masks."
        )
    return attn_mask.transpose(-2, -1)  # [B, 1, S, 1]


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Linear attention, O(L·D·E). Returns ``[B, H, L, E]``; padded keys contribute nothing."""
    key_mask = _linear_key_mask(attn_mask, q)
    qf = _elu_feature_map(q)  # [B, H, L, D]
    kf = _elu_feature_map(k)  # [B, H, S, D]
    if key_mask is not None:
        kf = kf * key_mask  # [B, H, S, D], padded keys -> 0
    kv = torch.matmul(kf.transpose(-2, -1), v)  # [B, H, D, E]
    z = kf.sum(dim=-2)  # [B, H, D]
    num = torch.matmul(qf, kv)  # [B, H, L, E]
    den = torch.matmul(qf, z.unsqueeze(-1))  # [B, H, L, 1]
    return num / den.clamp_min(eps)  # [B, H, L, E]


def linear_attention_weights(
    q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """The ``[B, H, L, S]`` matrix that :func:`linear_attention` applies implicitly (O(L²))."""
    key_mask = _linear_key_mask(attn_mask, q)
    scores = torch.matmul(_elu_feature_map(q), _elu_feature_map(k).transpose(-2, -1))  # [B, H, L, S]
    if key_mask is not None:
        scores = scores * key_mask.transpose(-2, -1)  # [B, 1, 1, S]
    return scores / scores.sum(dim=-1, keepdim=True).clamp_min(eps)


def edge_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    edge_index: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    edge_bias: torch.Tensor | None = None,
    edge_key: torch.Tensor | None = None,
    edge_value: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse softmax over incoming edges. O(E) memory.

    Args:
        q, k, v: ``[B, H, L, D]``, ``[B, H, L, D]``, ``[B, H, L, E]`` (self-attention: S = L).
        edge_index: ``[2, E]`` long over flattened positions ``b * L + l``; row 0 the
            source (key), row 1 the target (query).
        attn_mask: optional bool padding mask ``[B, 1, 1, L]``: edges from padded
            sources are dropped.
        edge_bias: optional ``[E, H]`` additive score per edge and head.
        edge_key, edge_value: optional ``[E, H, D]`` / ``[E, H, E_v]`` offsets added to the source's key
            and value on each edge (``score_e = q_dst · (k_src + ek_e)``, message ``a_e (v_src + ev_e)``).

    Returns:
        ``(out [B, H, L, E], alpha [E', H], edge_index [2, E'])`` where ``E'`` are the edges kept.
    """
    b, h, length, d = q.shape
    if k.shape[2] != length:
        raise ValueError(f"the 'edge' kernel is self-attention only: query length {length} != key length {k.shape[2]}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    n = b * length
    if debug_checks() and edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= n):
        # (the encoder validates edges once per forward; per call only in debug mode: a host sync)
        raise ValueError(f"edge_index values must lie in [0, B*L) = [0, {n}), got [{edge_index.min()}, {edge_index.max()}]")
    scale = d**-0.5 if scale is None else scale
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool or attn_mask.dim() != 4 or attn_mask.shape[1:3] != (1, 1):
            raise ValueError(
                "the 'edge' kernel takes its structure from edge_index; attn_mask may only be a bool padding "
                f"mask [B, 1, 1, L], got {attn_mask.dtype} {tuple(attn_mask.shape)}"
            )
        keep = attn_mask.reshape(n).index_select(0, edge_index[0])  # [E]
        edge_index = edge_index[:, keep]  # (a planned forward drops them once, and passes no mask)
        edge_bias = edge_bias[keep] if edge_bias is not None else None
        edge_key = edge_key[keep] if edge_key is not None else None
        edge_value = edge_value[keep] if edge_value is not None else None
    src, dst = edge_index[0], edge_index[1]
    for name, t, width in (("edge_key", edge_key, d), ("edge_value", edge_value, v.shape[-1])):
        if t is not None and tuple(t.shape) != (src.numel(), h, width):
            raise ValueError(f"{name} must be [E={src.numel()}, H={h}, {width}], got {tuple(t.shape)}")
    qn = q.transpose(1, 2).reshape(n, h, d)  # [N, H, D]
    kn = k.transpose(1, 2).reshape(n, h, d)  # [N, H, D]
    vn = v.transpose(1, 2).reshape(n, h, v.shape[-1])  # [N, H, E]
    row = h * max(d, vn.shape[-1])
    if dropout_p > 0 or edge_key is not None or edge_value is not None or src.numel() * row <= _EDGE_CHUNK_ELEMENTS:
        # autograd through the gathered rows: dropout on alpha, per-edge key / value offsets, and any graph whose
        # [E, H, D] rows fit one chunk (molecule batches, Cora): keeping them for backward costs at most a few
        # chunks' memory, and not recomputing them takes ~0.7x the time of the chunked Function (fwd + bwd, 300
        # atoms and 600 edges at 4 heads of 16: 0.88 vs 1.26 ms; Cora's size: 16.1 vs 23.5 ms)
        keys = kn.index_select(0, src)  # [E, H, D]
        if edge_key is not None:
            keys = keys + edge_key.to(keys.dtype)
        scores = (qn.index_select(0, dst) * keys).sum(-1) * scale  # [E, H]
        if edge_bias is not None:
            scores = scores + edge_bias
        alpha = _edge_softmax(scores, dst, n)
        values = vn.index_select(0, src)  # [E, H, E_v]
        if edge_value is not None:
            values = values + edge_value.to(values.dtype)
        dropped = dropout(alpha, dropout_p) if dropout_p > 0 else alpha
        msg = values * dropped.unsqueeze(-1)  # [E, H, E_v]
        out = torch.zeros((n, h, v.shape[-1]), dtype=msg.dtype, device=v.device).index_add(0, dst, msg)
    else:  # large graphs: O(E·H) saved for backward, the gathered [E, H, D] rows recomputed in chunks
        out, alpha = _EdgeAttention.apply(qn, kn, vn, src, dst, edge_bias, scale)
    return out.view(b, length, h, -1).transpose(1, 2), alpha, edge_index  # [B, H, L, E_v]


def _edge_softmax(scores: torch.Tensor, dst: torch.Tensor, n: int) -> torch.Tensor:
    """``scores [E, H]`` -> softmax over the edges that share a target node (``dst [E]``)."""
    h = scores.shape[1]
    # the max shift cancels exactly, so it carries no gradient
    row_max = torch.full((n, h), float("-inf"), dtype=scores.dtype, device=scores.device)
    row_max = row_max.scatter_reduce(0, dst[:, None].expand(-1, h), scores.detach(), "amax", include_self=True)
    expd = (scores - row_max.index_select(0, dst)).exp()  # [E, H]
    denom = torch.zeros((n, h), dtype=scores.dtype, device=scores.device).index_add(0, dst, expd)  # [N, H]
    return expd / denom.index_select(0, dst)  # [E, H]


_EDGE_CHUNK_ELEMENTS = 1 << 22  # [chunk, H, D] temporaries of at most 16 MB (fp32)


def _edge_chunks(num_edges: int, row_elements: int):
    step = max(1, _EDGE_CHUNK_ELEMENTS // max(1, row_elements))
    for start in range(0, num_edges, step):
        yield slice(start, min(start + step, num_edges))


class _EdgeAttention(torch.autograd.Function):
    """Edge attention without dropout, saving only ``q, k, v`` (nodes) and ``alpha [E, H]``.

    Forward: ``s_e = scale·<q[dst_e], k[src_e]> + bias_e``, ``alpha = softmax_dst(s)``,
    ``out[n] = Σ_{e: dst_e = n} alpha_e v[src_e]``. Backward recomputes the per-edge gathers
    chunk by chunk, so no ``[E, H, D]`` tensor outlives a chunk (autograd through the plain
    expression keeps three of them alive from forward to backward).
    """

    @staticmethod
    def forward(ctx, qn, kn, vn, src, dst, edge_bias, scale):  # [N,H,D], [N,H,D], [N,H,Ev], [E], [E], [E,H]?
        n, h, d = qn.shape
        num_edges = src.shape[0]
        scores = torch.empty((num_edges, h), dtype=qn.dtype, device=qn.device)
        for c in _edge_chunks(num_edges, h * d):
            scores[c] = (qn.index_select(0, dst[c]) * kn.index_select(0, src[c])).sum(-1)  # [e, H]
        scores.mul_(scale)
        if edge_bias is not None:
            scores.add_(edge_bias)
        alpha = _edge_softmax(scores, dst, n)  # [E, H]
        out = torch.zeros((n, h, vn.shape[-1]), dtype=vn.dtype, device=vn.device)
        for c in _edge_chunks(num_edges, h * vn.shape[-1]):
            out.index_add_(0, dst[c], vn.index_select(0, src[c]) * alpha[c].unsqueeze(-1))
        ctx.save_for_backward(qn, kn, vn, src, dst, alpha)
        ctx.scale, ctx.has_bias = scale, edge_bias is not None
        ctx.mark_non_differentiable(alpha)
        return out, alpha

    @staticmethod
    def backward(ctx, grad_out, grad_alpha_unused):  # grad_out [N, H, Ev]
        qn, kn, vn, src, dst, alpha = ctx.saved_tensors
        n, h, d = qn.shape
        num_edges = src.shape[0]
        grad_out = grad_out.contiguous()
        # d alpha_e = <grad_out[dst], v[src]>; d v[src] += alpha_e grad_out[dst]
        grad_alpha = torch.empty_like(alpha)  # [E, H]
        grad_v = torch.zeros_like(vn)
        for c in _edge_chunks(num_edges, h * vn.shape[-1]):
            g = grad_out.index_select(0, dst[c])  # [e, H, Ev]
            grad_alpha[c] = (g * vn.index_select(0, src[c])).sum(-1)
            grad_v.index_add_(0, src[c], g * alpha[c].unsqueeze(-1))
        # softmax backward per target: d s_e = alpha_e (d alpha_e - Σ_{e' -> same target} alpha_e' d alpha_e')
        weighted = alpha * grad_alpha  # [E, H]
        group = torch.zeros((n, h), dtype=alpha.dtype, device=alpha.device).index_add(0, dst, weighted)
        grad_s = weighted - alpha * group.index_select(0, dst)  # [E, H]
        grad_q, grad_k = torch.zeros_like(qn), torch.zeros_like(kn)
        gs = grad_s * ctx.scale
        for c in _edge_chunks(num_edges, h * d):
            w = gs[c].unsqueeze(-1)  # [e, H, 1]
            grad_q.index_add_(0, dst[c], kn.index_select(0, src[c]) * w)
            grad_k.index_add_(0, src[c], qn.index_select(0, dst[c]) * w)
        return grad_q, grad_k, grad_v, None, None, (grad_s if ctx.has_bias else None), None


def edge_weights_to_dense(alpha: torch.Tensor, edge_index: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """Edge attention ``alpha [E, H]`` -> dense weights ``[B, H, L, L]`` (for plots; O(L²))."""
    h = alpha.shape[1]
    dense = torch.zeros(batch * length, length, h, dtype=alpha.dtype, device=alpha.device)  # [N, L, H]
    dense[edge_index[1], edge_index[0] % length] = alpha
    return dense.view(batch, length, length, h).permute(0, 3, 1, 2)  # [B, H, L, L]


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    kernel: str = "sdpa",
    dropout_p: float = 0.0,
    scale: float | None = None,
    edge_index: torch.Tensor | None = None,
    edge_bias: torch.Tensor | None = None,
    need_weights: bool = False,
    edge_key: torch.Tensor | None = None,
    edge_value: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q kᵀ / √d + mask) v`` through the chosen kernel.

    Args:
        q: ``[B, H, L, D]``; k: ``[B, H, S, D]``; v: ``[B, H, S, E]``.
        attn_mask: broadcastable to ``[B, H, L, S]``; bool (True = may attend) or float bias.
            Build it from a padding + structure mask with :func:`seqattn.core.masks.build_attention_mask`.
        kernel: ``math`` | ``sdpa`` | ``linear`` | ``edge``.
        dropout_p: dropout on the attention weights (pass 0 in eval).
        scale: defaults to ``1 / √D``.
        edge_index, edge_bias: for ``kernel='edge'`` (see :func:`edge_attention`).
        need_weights: also return the weights ``[B, H, L, S]`` (``sdpa`` then runs ``math``).
        edge_key, edge_value: per-pair key / value offsets (module docstring): ``[E, H, .]`` for
            ``edge``, ``[B, H, L, S, .]`` for ``math`` and ``sdpa`` (which then runs ``math``).

    Returns:
        ``out [B, H, L, E]``, or ``(out, weights)`` when ``need_weights``.
    """
    check_kernel(kernel)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be 4-D [B, H, L, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if kernel == "edge":
        if edge_index is None:
            raise ValueError("kernel='edge' needs an edge_index [2, E]")
        out, alpha, kept = edge_attention(q, k, v, edge_index, attn_mask, dropout_p, scale, edge_bias,
                                          edge_key, edge_value)
        if need_weights:
            return out, edge_weights_to_dense(alpha, kept, q.shape[0], q.shape[2])
        return out
    if edge_index is not None:
        raise ValueError(f"edge_index is only used by kernel='edge', got kernel={kernel!r}")
    offsets = edge_key is not None or edge_value is not None
    if kernel == "linear":
        if offsets:
            raise ValueError("the 'linear' kernel takes no per-pair key / value offsets (edge_key, edge_value)")
        out = linear_attention(q, k, v, attn_mask)
        return (out, linear_attention_weights(q, k, attn_mask)) if need_weights else out
    if offsets:
        b, h, length, s_len = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        for name, t, width in (("edge_key", edge_key, q.shape[-1]), ("edge_value", edge_value, v.shape[-1])):
            if t is not None and (t.dim() != 5 or tuple(t.shape[1:]) != (h, length, s_len, width)
                                  or t.shape[0] not in (1, b)):
                raise ValueError(f"{name} must be [B, H={h}, L={length}, S={s_len}, {width}] for kernel={kernel!r}, "
                                 f"got {tuple(t.shape)}")
    if kernel == "math" or need_weights or offsets:
        out, weights = math_attention(q, k, v, attn_mask, dropout_p, scale, edge_key, edge_value)
        return (out, weights) if need_weights else out
    return sdpa_attention(q, k, v, attn_mask, dropout_p, scale)
