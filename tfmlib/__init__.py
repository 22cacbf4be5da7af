"""tfmlib: the small PyTorch library the course builds, chapter by chapter.

Importing it loads torch and nothing slow (no matplotlib: ``tfmlib.plot`` is imported on demand).
"""
from .attention import (KVCache, MultiHeadAttention, attention_mask, causal_mask, causal_mask_offset,
                        fast_attention, merge_heads, padding_mask, scaled_dot_product_attention, split_heads)
from .blocks import DecoderBlock, EncoderBlock, FeedForward, add_norm
from .efficient import (allowed_pairs, banded_attention, blockwise_attention, global_mask, peak_memory,
                        random_mask, sliding_window_mask, time_fn)
from .models import (AttentionClassifier, DecoderLM, RNNClassifier, RNNSeq2Seq, Transformer, modern_gpt,
                     record_attention, top_p_filter)
from .modern import (GroupedQueryAttention, RMSNorm, SwiGLU, apply_rope, grouped_query_attention, repeat_kv,
                     rms_norm, swiglu)
from .positions import (ALiBiMultiHeadAttention, LearnedPositions, RelativeMultiHeadAttention,
                        RelativePositions, RotaryMultiHeadAttention, SinusoidalPositions, alibi_bias,
                        alibi_slopes, relative_attention, relative_position_index, rope,
                        sinusoidal_offset_matrix, sinusoidal_positions)
from .scaling import (BESIROGLU_PARAMS, CHINCHILLA_PARAMS, chinchilla_loss, compute_optimal, fit_chinchilla,
                      fit_power_law, isoflop_loss)
from .utils import get_device, seed_everything
from . import bpe, data, train

__version__ = "0.1.0"
