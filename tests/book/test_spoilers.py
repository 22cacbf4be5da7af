"""scripts/spoilers.py: finding a graded function's body in a page a reader sees (issue 17).

These tests run on small hand-made pages, in milliseconds; the check on the built site itself is
`test_no_graded_answer_is_shown_unfolded` in tests/book/test_site.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

import spoilers  # noqa: E402

# The course plan's 23 graded functions (the exercises may add helpers; these must all be found).
GRADED = {
    "rnn_forward", "grad_norm_by_distance", "attention_step", "scaled_dot_product_attention", "causal_mask",
    "self_attention", "split_heads", "merge_heads", "multi_head_attention", "sinusoidal_positions",
    "relative_position_index", "relative_attention_scores", "padding_mask", "decoder_mask", "layer_norm",
    "decoder_block", "sliding_window_mask", "global_mask", "random_mask", "blockwise_attention",
    "chinchilla_loss", "fit_chinchilla", "fit_power_law",
}
# tfmlib functions of the same name as a graded one (the rest exist in tfmlib only as modules).
IN_TFMLIB = {
    "scaled_dot_product_attention", "causal_mask", "split_heads", "merge_heads", "sinusoidal_positions",
    "relative_position_index", "padding_mask", "sliding_window_mask", "global_mask", "random_mask",
    "blockwise_attention", "chinchilla_loss", "fit_chinchilla", "fit_power_law",
    "rms_norm", "swiglu", "apply_rope", "grouped_query_attention",
}

BODY = spoilers.Body("f", "test", tuple(spoilers.normalise(
    "d_k = q.shape[-1]\n"
    "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)\n"
    "weights = torch.softmax(scores, dim=-1)\n"
    "return weights @ v, weights\n")))


def page(html: str, unfold: bool = False) -> spoilers.Page:
    return spoilers.Page.from_html("p.html", html, unfold)


def listing(code: str) -> str:
    """Code as Pygments and Sphinx render it: spans inside a <pre>, with escaped characters."""
    spans = "".join(f'<span class="n">{line}</span>\n' for line in
                    code.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").splitlines())
    return f'<div class="highlight"><pre>{spans}</pre></div>'


CODE = """def attention(q, k, v):
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
"""


def test_the_graded_functions_and_their_bodies_are_found():
    bodies = spoilers.graded_bodies()
    assert {b.function for b in bodies if b.source.startswith("solutions/")} >= GRADED
    assert {b.function for b in bodies if b.source.startswith("tfmlib/")} == IN_TFMLIB
    assert all(b.lines for b in bodies)
    # The docstring is not part of a body (the released notebooks show it), the solution markers neither.
    causal = [b for b in bodies if b.function == "causal_mask" and b.source.startswith("solutions/")]
    assert causal[0].lines == ("returntorch.ones(n,n,dtype=torch.bool).tril()",)


def test_a_listing_in_the_open_is_shown():
    assert page(f"<p>Here is the code:</p>{listing(CODE)}").shows(BODY) == "verbatim"


def test_spacing_and_comments_do_not_hide_a_copy():
    copy = CODE.replace(" @ ", "@").replace("dim=-1", "dim = -1") \
               .replace("weights = torch", "# softmax over the keys\n    weights = torch")
    assert page(listing(copy)).shows(BODY) == "verbatim"


def test_a_copy_with_one_line_changed_is_shown():
    changed = CODE.replace("d_k = q.shape[-1]", "d_k = q.size(-1)")
    assert page(listing(changed)).shows(BODY) == "75% of its lines in one code block"


def test_a_closed_details_folds_it_and_an_open_one_does_not():
    folded = f"<details><summary>Spoiler: attention</summary>{listing(CODE)}</details>"
    assert page(folded).shows(BODY) is None
    assert "Spoiler: attention" in spoilers.visible_text(folded), "the label stays visible"
    assert page(f'<details open="open"><summary>s</summary>{listing(CODE)}</details>').shows(BODY)
    # Unfolding every <details> finds it again: the folded listing is really there.
    assert page(folded, unfold=True).shows(BODY) == "verbatim"


def test_nested_details_inside_a_closed_one_stay_folded():
    html = f"<details><summary>a</summary><details open><summary>b</summary>{listing(CODE)}</details></details>"
    assert page(html).shows(BODY) is None


def test_scripts_do_not_count_and_common_lines_alone_do_not_match():
    assert page(f"<script>{CODE}</script>").shows(BODY) is None
    # One line in common with a body is not the body.
    assert page(listing("weights = torch.softmax(scores, dim=-1)\nprint(weights)\n")).shows(BODY) is None
    # Nor are the body's lines scattered over separate cells of a page, each among other code.
    lines = [line.strip() for line in CODE.splitlines()[1:]]
    scattered = "".join(listing(f"x = {i}\n{line}\ny = {i}\n") for i, line in enumerate(lines[::-1]))
    assert page(scattered).shows(BODY) is None


def test_a_comment_marker_inside_a_string_is_kept():
    assert spoilers.normalise('x = "#" # comment') == ['x="#"']


def test_the_command_line_fails_on_a_site_that_shows_an_answer(tmp_path, capsys):
    causal = next(b for b in spoilers.graded_bodies() if b.function == "causal_mask" and b.source.startswith("tfmlib/"))
    assert causal.source == "tfmlib/attention.py"
    import inspect

    import tfmlib
    (tmp_path / "ch.html").write_text(f"<html><body>{listing(inspect.getsource(tfmlib.causal_mask))}</body></html>")
    assert spoilers.main([str(tmp_path)]) == 1
    assert "SHOWN  ch.html: causal_mask (tfmlib/attention.py), verbatim" in capsys.readouterr().out
    (tmp_path / "ch.html").write_text(f"<details><summary>Spoiler</summary>"
                                      f"{listing(inspect.getsource(tfmlib.causal_mask))}</details>")
    assert spoilers.main([str(tmp_path)]) == 0


@pytest.mark.parametrize("html", ["", "<p>no code</p>"])
def test_pages_without_code_show_nothing(html):
    assert all(page(html).shows(b) is None for b in spoilers.graded_bodies())
