"""The library shortcuts: what each exercise asks the learner to write, as PyTorch implements it.

One list, read three ways:

- ``tfmcheck.checking`` forbids calling them while a learner's function runs (its guard, ``forbid_shortcuts``);
- the grader's scan (``tfmgrader.scan``) refuses every one of these names in an answer;
- the graded kernel refuses them at PyTorch's dispatcher (``refuse``) for its whole life, from its start, before
  any cell runs (``tfmgrader.sandbox_kernel.AUDIT_LAUNCHER``): no answer cell ever runs while they still work,
  so none can call them, copy their code or capture what they compute before a test forbids them (#31).

The teaching library (the ``tfmlib`` group) is not in the graded kernel at all (``tfmcheck.withheld``).

Importing it loads only the standard library and changes nothing; ``refuse`` imports ``tfmcheck.lockdown`` (torch).
"""
from __future__ import annotations

import importlib

#: group name -> (names of PyTorch built-ins and aten ops that must not be called, dotted names of the Python
#: functions and classes that implement what the exercises ask for).  Built-ins are matched by name
#: (``torch.layer_norm``, ``torch._C._nn.scaled_dot_product_attention`` and aten ops called through ``torch.ops``
#: alike); Python functions by their code object, and a class by the code of every function it defines
#: (constructing it counts as calling it).
SHORTCUT_POLICY = {
    "sdpa": ({"scaled_dot_product_attention", "_scaled_dot_product_attention_math",
              "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
              "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward",
              "_efficient_attention_forward", "_native_multi_head_attention", "_transformer_encoder_layer_fwd",
              "flex_attention"},
             ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.multi_head_attention_forward",
              "torch.nn.MultiheadAttention")),
    "layer_norm": ({"layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "batch_norm",
                    "native_batch_norm", "_batch_norm_impl_index", "instance_norm", "rms_norm", "_fused_rms_norm"},
                   ("torch.nn.functional.layer_norm", "torch.nn.functional.group_norm",
                    "torch.nn.functional.batch_norm", "torch.nn.functional.instance_norm",
                    "torch.nn.functional.rms_norm", "torch.nn.LayerNorm", "torch.nn.GroupNorm", "torch.nn.RMSNorm")),
    "rnn": ({"rnn_tanh", "rnn_tanh_cell", "rnn_relu", "rnn_relu_cell", "gru", "gru_cell", "lstm", "lstm_cell"},
            ("torch.nn.RNN", "torch.nn.RNNCell", "torch.nn.GRU", "torch.nn.GRUCell", "torch.nn.LSTM",
             "torch.nn.LSTMCell")),
    "transformer": (set(), ("torch.nn.Transformer", "torch.nn.TransformerEncoder", "torch.nn.TransformerDecoder",
                            "torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer")),
    # every function defined in the teaching library (tfmlib) and in tfmcheck, except tfmcheck.checking
    "tfmlib": (set(), ()),
}

#: What the graded kernel refuses besides each group's aten operators: relatives of theirs that compute the same.
DISPATCH_EXTRA = {
    "sdpa": ("_scaled_dot_product_attention_math_for_mps", "_flash_attention_forward_no_dropout_inplace"),
    "layer_norm": ("_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                   "_native_batch_norm_legit_no_training", "_batch_norm_with_update",
                   "_batch_norm_with_update_functional", "_batch_norm_no_update", "cudnn_batch_norm",
                   "miopen_batch_norm"),
    "rnn": ("_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "_cudnn_rnn", "miopen_rnn", "mkldnn_rnn_layer",
            "quantized_lstm", "quantized_gru"),
}

#: ... and the Python entry points that compute the same with basic operators (``module:qualified name``):
#: nn.MultiheadAttention's forward with ``need_weights=True``, flex attention's reference (round 21).
PYTHON_SHORTCUTS = {"sdpa": ("torch.nn.functional:multi_head_attention_forward",
                             "torch._higher_order_ops.flex_attention:math_attention",
                             "torch._higher_order_ops.flex_attention:_math_attention_inner",
                             "torch._higher_order_ops.flex_attention:sdpa_dense",
                             "torch.ao.nn.quantizable.modules.activation:MultiheadAttention._forward_impl")}

#: The groups the graded kernel refuses from its start: every one but tfmlib, which it does not have.
REFUSED_GROUPS = tuple(g for g in SHORTCUT_POLICY if g != "tfmlib")


def python_shortcuts(group: str) -> list:
    """The functions of ``PYTHON_SHORTCUTS[group]`` this PyTorch has."""
    found = []
    for path in PYTHON_SHORTCUTS.get(group, ()):
        module, _, qualname = path.partition(":")
        try:
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            continue
        found.append(obj)
    return found


def refuse(groups=REFUSED_GROUPS) -> None:
    """For the rest of this process, on every thread: the aten operators of ``groups`` (and ``DISPATCH_EXTRA``)
    raise at PyTorch's dispatcher and their Python entry points run code that raises (``tfmcheck.lockdown``).
    Call it only in a graded kernel: nothing undoes it."""
    from tfmcheck import lockdown

    for group in groups:
        if group in SHORTCUT_POLICY and group != "tfmlib":
            lockdown.refuse((*SHORTCUT_POLICY[group][0], *DISPATCH_EXTRA.get(group, ())), python_shortcuts(group))
