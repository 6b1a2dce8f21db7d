"""The attention core: kernels -> MultiHeadAttention -> Encoder. Modality-agnostic.

Mask convention (everywhere): bool ``True`` = real token / may attend; float = additive bias.
"""

from seqattn.core.attention import MultiHeadAttention
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
    edge_index_to_mask,
    from_torch_key_padding_mask,
    lengths_to_mask,
    local_window_mask,
    mask_to_edge_index,
)
from seqattn.core.positional import (
    POSITIONALS,
    LearnedPositional,
    RotaryEmbedding,
    SinusoidalPositional,
    build_positional,
    sinusoidal_table,
)
from seqattn.core.tokens import IGNORE_INDEX, Tokens, prepend_global_token

__all__ = [
    "IGNORE_INDEX",
    "KERNELS",
    "POSITIONALS",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LearnedPositional",
    "MultiHeadAttention",
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
    "prepend_global_token",
    "math_attention",
    "scaled_dot_product_attention",
    "sdpa_attention",
    "sinusoidal_table",
]
