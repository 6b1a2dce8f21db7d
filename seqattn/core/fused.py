"""The fused kernel's extras: learned additive biases without the math path, and exact attention
weights from the fused kernel's logsumexp.

Letters: b batch, h heads, l query length, s key length, d head width, e edges.

``F.scaled_dot_product_attention`` with a float mask that requires grad (a learned edge / distance
bias) leaves the fused kernel for the math path (measured 1365 vs 520 ms at L=1024). Two exact
replacements, both custom autograd functions that compute the bias gradient only at the ``E``
positions where the bias lives (``dS = P ⊙ (dP − rowsum(dO ⊙ O))`` there, nowhere else):

- :class:`FlashAttentionCPU` (long sequences, CPU): forward and ``q/k/v`` gradients through
  ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` (the kernel SDPA runs), which also
  returns the logsumexp ``lse``; the bias gradient gathers ``P_e = exp(q_i·k_j·scale + b_e − lse_i)``
  per edge, in chunks.
- :class:`SmallBiasedAttention` (short sequences, e.g. molecules of ~30 atoms, where the fused
  kernel's per-row overhead dominates): ``baddbmm`` (the bias added inside the matmul), softmax,
  ``bmm``; the weights are kept for backward (small), the bias gradient is ``dS`` at the edges.

The weights of a layer a figure needs come from the same call: ``exp(q kᵀ·scale + mask − lse)``
(:func:`weights_from_lse`) instead of a second, math-path model.
"""

from __future__ import annotations

import torch

#: sequences up to this length take SmallBiasedAttention on CPU (measured crossover on this CPU:
#: python -m seqattn.bench core --cells graph_bias)
SMALL_LENGTH = 128
_CHUNK_ELEMENTS = 1 << 22  # [chunk, H, D] gathers of at most 16 MB (fp32)


def cpu_flash_on(device: torch.device | str | None) -> bool:
    """Whether this torch has the CPU flash kernel and ``device`` is a CPU."""
    return (device is not None and torch.device(device).type == "cpu"
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"))


def cpu_flash_available(q: torch.Tensor, dropout_p: float = 0.0) -> bool:
    """Whether :class:`FlashAttentionCPU` can run: a CPU tensor, no dropout, a dtype the kernel takes."""
    return (dropout_p == 0.0 and q.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
            and cpu_flash_on(q.device))


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``[B, H, N, X]`` -> ``[B·N, H, X]`` (flattened positions ``b·N + n``, the edge convention)."""
    b, h, n, x = t.shape
    return t.transpose(1, 2).reshape(b * n, h, x)


def _chunks(num: int, row_elements: int):
    step = max(1, _CHUNK_ELEMENTS // max(1, row_elements))
    for start in range(0, num, step):
        yield slice(start, min(start + step, num))


def sparse_bias_grad(q, k, v, out, grad_out, lse, at_edges, src, dst, scale) -> torch.Tensor:
    """``dS`` at the edges: ``[E, H]`` gradient of an additive bias living at (query ``dst_e``, key
    ``src_e``) over flattened positions, from the fused forward's ``out`` and ``lse [B, H, N]``;
    ``at_edges [E, H]``: the additive mask's values there (the bias, or -inf where other structure
    forbids the pair: no gradient then)."""
    b, h, n, d = q.shape
    qn, kn, vn, on, gn = _rows(q), _rows(k), _rows(v), _rows(out), _rows(grad_out)  # [B·N, H, .]
    ln = lse.transpose(1, 2).reshape(b * n, h).to(q.dtype)  # [B·N, H]
    delta = (gn * on).sum(-1)  # [B·N, H]: rowsum(dO ⊙ O)
    grad = torch.empty(src.shape[0], h, dtype=q.dtype, device=q.device)
    for c in _chunks(src.shape[0], h * d):
        s, t = src[c], dst[c]
        p = ((qn.index_select(0, t) * kn.index_select(0, s)).sum(-1) * scale + at_edges[c].to(q.dtype)
             - ln.index_select(0, t)).exp()  # [e, H]
        dp = (gn.index_select(0, t) * vn.index_select(0, s)).sum(-1)  # [e, H]
        grad[c] = p * (dp - delta.index_select(0, t))
    return grad


class FlashAttentionCPU(torch.autograd.Function):
    """``(out [B, H, L, E], lse [B, H, L])`` of the CPU flash kernel, differentiable in ``q, k, v`` and,
    when given, in ``bias [E, H]`` (its values are in the float ``mask [B, H, L, S]`` at the positions
    ``flat [E, H]``, on the edges ``src -> dst`` over flattened positions ``b·L + l``).

    ``mask``: ``None`` or a float additive mask broadcastable to ``[B, H, L, S]`` (no gradient; dead
    rows revived by the caller). No dropout."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, bias, src, dst, flat):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse, mask, bias, src, dst, flat)
        ctx.scale = scale if scale is not None else q.shape[-1] ** -0.5
        ctx.given_scale = scale
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse_unused):
        q, k, v, out, lse, mask, bias, src, dst, flat = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=ctx.given_scale)
        dbias = None
        if bias is not None and ctx.needs_input_grad[5]:
            at_edges = mask.reshape(-1).index_select(0, flat.reshape(-1)).view(flat.shape)  # [E, H]
            dbias = sparse_bias_grad(q, k, v, out, grad_out, lse, at_edges, src, dst, ctx.scale).to(bias.dtype)
        return dq, dk, dv, None, None, dbias, None, None, None


class SmallBiasedAttention(torch.autograd.Function):
    """Short sequences: ``softmax(q kᵀ·scale + mask) v`` with batched matmuls, differentiable in
    ``q, k, v`` and in ``bias [E, H]`` placed at ``flat [E, H]`` (indices into the ``[B, H, L, S]``
    mask). Returns ``(out [B, H, L, E], weights [B, H, L, S])`` (weights: no gradient)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, bias, flat):
        b, h, n, d = q.shape
        s, e = k.shape[2], v.shape[-1]
        q3, k3, v3 = q.reshape(b * h, n, d), k.reshape(b * h, s, d), v.reshape(b * h, s, e)
        m3 = mask.to(q.dtype).expand(b, h, n, s).reshape(b * h, n, s)
        scores = torch.baddbmm(m3, q3, k3.transpose(1, 2), alpha=scale)  # [B·H, L, S]
        weights = torch.softmax(scores, dim=-1)
        out = torch.bmm(weights, v3)  # [B·H, L, E]
        ctx.save_for_backward(q3, k3, v3, weights, flat)
        ctx.scale, ctx.shape, ctx.has_bias = scale, (b, h, n, d, s, e), bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.mark_non_differentiable(weights)
        return out.view(b, h, n, e), weights.view(b, h, n, s)

    @staticmethod
    def backward(ctx, grad_out, grad_weights_unused):
        q3, k3, v3, weights, flat = ctx.saved_tensors
        b, h, n, d, s, e = ctx.shape
        go = grad_out.reshape(b * h, n, e)
        dv = torch.bmm(weights.transpose(1, 2), go)
        dp = torch.bmm(go, v3.transpose(1, 2))  # [B·H, L, S]
        ds = torch._softmax_backward_data(dp, weights, -1, weights.dtype)
        dq = torch.bmm(ds, k3).mul_(ctx.scale)
        dk = torch.bmm(ds.transpose(1, 2), q3).mul_(ctx.scale)
        dbias = ds.reshape(-1).index_select(0, flat.reshape(-1)).view(flat.shape).to(ctx.bias_dtype) if (
            ctx.has_bias and ctx.needs_input_grad[5]) else None
        return dq.view(b, h, n, d), dk.view(b, h, s, d), dv.view(b, h, s, e), None, None, dbias, None


def weights_from_lse(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, lse: torch.Tensor,
                     scale: float | None) -> torch.Tensor:
    """Exact attention weights ``[B, H, L, S]`` of a fused call: ``exp(q kᵀ·scale + mask − lse)``
    (no gradient; the caller zeroes dead / padded rows)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    b, h, n, d = q.shape
    s = k.shape[2]
    with torch.no_grad():
        # q kᵀ·scale − lse in one pass: the logsumexp is the matmul's additive input
        base = lse.to(q.dtype).neg().reshape(b * h, n, 1).expand(b * h, n, s)
        scores = torch.baddbmm(base, q.reshape(b * h, n, d), k.reshape(b * h, s, d).transpose(1, 2),
                               alpha=scale).view(b, h, n, s)  # [B, H, L, S]
        if mask is not None:
            scores = scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)
        return scores.exp_()
