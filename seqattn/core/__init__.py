"""The attention core: kernels -> MultiHeadAttention -> Encoder. Modality-agnostic.

Structure is described (``Tokens``: padding, window, grid window, causal, global tokens, graph
edges) and planned once per forward onto an exact kernel whose cost follows the allowed pairs
(:mod:`seqattn.core.plan`, every batch and every layer call; the path -> kernel table is in
:mod:`seqattn.core.attention_plan`: band, varlen, causal, biased, edge, flex; ``math`` the reference).

Mask convention (everywhere): bool ``True`` = real token / may attend; float = additive bias.
"""

from seqattn.core.attention import GlobalLinearAttention, MultiHeadAttention
from seqattn.core.encoder import Encoder, EncoderLayer, FeedForward
from seqattn.core.kernels import (
    KERNELS,
    edge_attention,
    linear_attention,
    linear_attention_weights,
    math_attention,
    scaled_dot_product_attention,
    sdpa_attention,
)
from seqattn.core.masks import (
    build_attention_mask,
    causal_mask,
    combine_masks,
    edge_index_to_mask,
    from_torch_key_padding_mask,
    lengths_to_mask,
    local_window_mask,
    mask_to_edge_index,
    structure_allows,
    structure_mask,
)
from seqattn.core.attention_plan import KERNEL_OF_PATH, PATHS, AttentionPlan
from seqattn.core.plan import PlanOptions, Structure, plan_attention, plan_layer, plan_structure
from seqattn.core.positional import (
    POSITIONALS,
    LearnedPositional,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositional,
    build_positional,
    sinusoidal_table,
)
from seqattn.core.tokens import Tokens, prepend_global_token

__all__ = [
    "AttentionPlan",
    "KERNEL_OF_PATH",
    "PlanOptions",
    "Structure",
    "combine_masks",
    "plan_layer",
    "plan_structure",
    "structure_allows",
    "PATHS",
    "KERNELS",
    "POSITIONALS",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "GlobalLinearAttention",
    "LearnedPositional",
    "MultiHeadAttention",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositional",
    "Tokens",
    "build_attention_mask",
    "build_positional",
    "causal_mask",
    "edge_attention",
    "edge_index_to_mask",
    "from_torch_key_padding_mask",
    "lengths_to_mask",
    "linear_attention",
    "linear_attention_weights",
    "local_window_mask",
    "mask_to_edge_index",
    "plan_attention",
    "prepend_global_token",
    "math_attention",
    "scaled_dot_product_attention",
    "sdpa_attention",
    "sinusoidal_table",
    "structure_mask",
]
