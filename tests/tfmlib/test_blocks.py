"""tfmlib.blocks checked against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer."""
import pytest
import torch

import tfmlib
from conftest import TOL, max_err
from test_attention import copy_into_torch_mha


def copy_common(ours, theirs):
    with torch.no_grad():
        theirs.linear1.load_state_dict(ours.ff.linear1.state_dict())
        theirs.linear2.load_state_dict(ours.ff.linear2.state_dict())
        # PyTorch numbers its norms by sublayer: self-attention, (cross-attention,) feed-forward
        names = ("norm_self", "norm_cross", "norm_ff") if hasattr(theirs, "norm3") else ("norm_self", "norm_ff")
        for i, name in enumerate(names, start=1):
            getattr(theirs, f"norm{i}").load_state_dict(getattr(ours, name).state_dict())
    copy_into_torch_mha(ours.self_attn, theirs.self_attn)


def randomise(module):
    """Random LayerNorm gains/biases too, so that a swapped norm would be caught."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_torch(device, dtype, norm_first):
    torch.manual_seed(0)
    d, h, ff = 16, 4, 32
    ours = tfmlib.EncoderBlock(d, h, ff, norm_first=norm_first).to(device, dtype)
    randomise(ours)
    theirs = torch.nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True,
                                              norm_first=norm_first).to(device, dtype)
    copy_common(ours, theirs)
    x = torch.randn(3, 6, d, device=device, dtype=dtype)
    pad = tfmlib.padding_mask(torch.tensor([6, 3, 5]), 6).to(device)
    out = ours(x, mask=tfmlib.attention_mask(pad))
    ref = theirs(x, src_key_padding_mask=~pad)       # train mode: PyTorch's plain (non-fast) path
    assert max_err(out, ref) <= TOL[dtype]
    assert max_err(ours(x), theirs(x)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch(device, dtype, norm_first):
    torch.manual_seed(0)
    d, h, ff = 16, 4, 32
    ours = tfmlib.DecoderBlock(d, h, ff, norm_first=norm_first).to(device, dtype)
    randomise(ours)
    theirs = torch.nn.TransformerDecoderLayer(d, h, ff, dropout=0.0, batch_first=True,
                                              norm_first=norm_first).to(device, dtype)
    copy_common(ours, theirs)
    copy_into_torch_mha(ours.cross_attn, theirs.multihead_attn)
    x = torch.randn(3, 5, d, device=device, dtype=dtype)
    memory = torch.randn(3, 7, d, device=device, dtype=dtype)
    src_pad = tfmlib.padding_mask(torch.tensor([7, 2, 4]), 7).to(device)
    causal = tfmlib.causal_mask(5, device=device)
    out = ours(x, memory, self_mask=causal, memory_mask=tfmlib.attention_mask(src_pad, q_len=5))
    ref = theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~src_pad)
    assert max_err(out, ref) <= TOL[dtype]


def test_decoder_only_block_needs_no_memory():
    block = tfmlib.DecoderBlock(8, 2, 16, cross_attention=False)
    assert block.cross_attn is None and not hasattr(block, "norm_cross")
    assert block(torch.randn(2, 3, 8), self_mask=tfmlib.causal_mask(3)).shape == (2, 3, 8)
    with pytest.raises(ValueError, match="memory must be given exactly"):
        block(torch.randn(2, 3, 8), torch.randn(2, 4, 8))


def test_feedforward_is_position_wise():
    torch.manual_seed(0)
    ff = tfmlib.FeedForward(8, 32)
    x = torch.randn(2, 5, 8)
    per_position = torch.stack([ff(x[:, t]) for t in range(5)], dim=1)
    assert torch.allclose(ff(x), per_position, atol=1e-6)
    with pytest.raises(ValueError, match="activation must be one of"):
        tfmlib.FeedForward(8, 32, activation="swish")
