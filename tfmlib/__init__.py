"""tfmlib: the small PyTorch library the course builds, chapter by chapter.

Importing it loads torch and nothing slow (no matplotlib: ``tfmlib.plot`` is imported on demand).
"""
from .attention import (MultiHeadAttention, attention_mask, causal_mask, merge_heads, padding_mask,
                        scaled_dot_product_attention, split_heads)
from .blocks import DecoderBlock, EncoderBlock, FeedForward, add_norm
from .models import DecoderLM, RNNSeq2Seq, Transformer, record_attention
from .positions import (ALiBiMultiHeadAttention, LearnedPositions, RelativeMultiHeadAttention,
                        RelativePositions, RotaryMultiHeadAttention, SinusoidalPositions, alibi_bias,
                        alibi_slopes, relative_attention, relative_position_index, rope,
                        sinusoidal_positions)
from .utils import get_device, seed_everything

__version__ = "0.1.0"
