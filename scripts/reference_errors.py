#!/usr/bin/env python
"""Print the largest absolute difference between tfmlib and PyTorch's own layers (weights copied).

    python scripts/reference_errors.py

The tests (tests/tfmlib/test_attention.py, tests/tfmlib/test_blocks.py) assert these stay within 1e-5 in float32
and 1e-10 in float64; this script prints the actual figures.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import tfmlib

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tfmlib"))
from test_attention import copy_into_torch_mha
from test_blocks import copy_common, randomise


def errors(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, t, d, dtype=dtype) for t, d in ((5, 8), (7, 8), (7, 4)))
    mask = torch.rand(2, 3, 5, 7) > 0.5
    mask[..., 0] = True
    out = {"scaled_dot_product_attention": tfmlib.scaled_dot_product_attention(q, k, v, mask=mask)[0]
           - F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
           "fast_attention": tfmlib.fast_attention(q, k, v, mask=mask)
           - F.scaled_dot_product_attention(q, k, v, attn_mask=mask)}
    ours = tfmlib.MultiHeadAttention(16, 4).to(dtype)
    theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True).to(dtype)
    copy_into_torch_mha(ours, theirs)
    x, memory, causal = torch.randn(3, 6, 16, dtype=dtype), torch.randn(3, 4, 16, dtype=dtype), tfmlib.causal_mask(6)
    ref_mha = theirs(x, x, x, attn_mask=~causal, need_weights=False)[0]
    out["MultiHeadAttention (causal)"] = ours(x, mask=causal) - ref_mha
    out["MultiHeadAttention (weights)"] = ours(x, mask=causal, need_weights=True)[0] - ref_mha
    for norm_first, name in ((False, "post-norm"), (True, "pre-norm")):
        enc = tfmlib.EncoderBlock(16, 4, 32, norm_first=norm_first).to(dtype)
        randomise(enc)
        ref = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                               norm_first=norm_first).to(dtype)
        copy_common(enc, ref)
        out[f"EncoderBlock ({name})"] = enc(x) - ref(x)
        dec = tfmlib.DecoderBlock(16, 4, 32, norm_first=norm_first).to(dtype)
        randomise(dec)
        ref = torch.nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                               norm_first=norm_first).to(dtype)
        copy_common(dec, ref)
        copy_into_torch_mha(dec.cross_attn, ref.multihead_attn)
        out[f"DecoderBlock ({name})"] = dec(x, memory, self_mask=causal) - ref(x, memory, tgt_mask=~causal)
    return {name: diff.abs().max().item() for name, diff in out.items()}


if __name__ == "__main__":
    e32, e64 = errors(torch.float32), errors(torch.float64)
    print(f"{'layer':<32} {'float32':>10} {'float64':>10}")
    for name in e32:
        print(f"{name:<32} {e32[name]:10.1e} {e64[name]:10.1e}")
