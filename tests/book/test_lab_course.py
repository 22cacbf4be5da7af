"""scripts/lab/course_lab.py without a server or a browser (issue 20): a chapter saved with unchanged cells is not
written, an edited one is; Validate tells exercises from other notebooks and puts the named mistake first.
Issue 35: a chapter's glue roles reach the Lab as inline expressions, its citations as author-year links, and go
back to the file exactly, with the kernel's metadata up front; kernel_startup.py's ``glued`` formats as the book
does.
The browser test in test_lab.py plays the same in a real JupyterLab."""
from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "lab"))
import course_lab  # noqa: E402

CHAPTER = "03_self_attention.md"


@pytest.fixture
def manager(tmp_path):
    shutil.copy(REPO / "book" / CHAPTER, tmp_path / CHAPTER)
    return course_lab.ChapterKeepingContentsManager(root_dir=str(tmp_path))


def _run(coroutine):
    return asyncio.run(coroutine)


def test_an_unchanged_chapter_is_not_rewritten(manager, tmp_path):
    before = (tmp_path / CHAPTER).read_bytes()
    model = _run(manager.get(CHAPTER, content=True, type="notebook"))
    nb = model["content"]
    # what JupyterLab changes without the learner: the kernel's metadata and the outputs of a run
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.2"}
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [nbformat.v4.new_output("stream", text="device: cpu\n")]
    code["execution_count"] = 1
    saved = _run(manager.save({"type": "notebook", "format": "json", "content": nb}, CHAPTER))
    assert (tmp_path / CHAPTER).read_bytes() == before
    assert saved["type"] == "notebook" and saved["path"] == CHAPTER and saved.get("content") is None


def test_an_edited_chapter_is_saved(manager, tmp_path):
    model = _run(manager.get(CHAPTER, content=True, type="notebook"))
    nb = model["content"]
    nb["cells"][-1]["source"] += "\n\nA learner's note."
    _run(manager.save({"type": "notebook", "format": "json", "content": nb}, CHAPTER))
    assert "A learner's note." in (tmp_path / CHAPTER).read_text()


def test_pairing_a_chapter_in_jupytexts_menu_is_saved(manager, tmp_path):
    model = _run(manager.get(CHAPTER, content=True, type="notebook"))
    model["content"]["metadata"].setdefault("jupytext", {})["formats"] = "ipynb,md:myst"
    _run(manager.save({"type": "notebook", "format": "json", "content": model["content"]}, CHAPTER))
    assert (tmp_path / CHAPTER.replace(".md", ".ipynb")).exists()
    assert "formats: ipynb,md:myst" in (tmp_path / CHAPTER).read_text()


def test_a_plain_file_and_a_new_notebook_are_saved_as_usual(manager, tmp_path):
    _run(manager.save({"type": "file", "format": "text", "content": "hello\n"}, "notes.txt"))
    assert (tmp_path / "notes.txt").read_text() == "hello\n"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    _run(manager.save({"type": "notebook", "format": "json", "content": json.loads(json.dumps(nb))}, "new.md"))
    assert "1 + 1" in (tmp_path / "new.md").read_text()


def test_only_notebooks_with_nbgrader_cells_are_exercises(tmp_path):
    exercise = REPO / "notebooks" / "03_self_attention" / "03_self_attention.ipynb"
    assert course_lab.is_exercise(exercise)
    assert not course_lab.is_exercise(REPO / "book" / CHAPTER)
    plain = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), str(plain))
    assert not course_lab.is_exercise(plain)
    sentence = course_lab.NOT_AN_EXERCISE.format(name=CHAPTER)
    assert "\n" not in sentence and sentence.count(".") == 3  # one sentence (the dots of NN_name.ipynb and .md)


def test_the_named_mistake_comes_before_the_test_and_the_traceback():
    cell = nbformat.v4.new_code_cell("check.close(out, expected)")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 2, "grade_id": "t"}
    cell.outputs = [nbformat.v4.new_output(
        "error", ename="CheckFailure", evalue="attention: Your scores are not divided by √d_k.\nexpected 0.67, got 0.88",
        traceback=["\x1b[0;31m------\x1b[0m", "\x1b[0;31mCheckFailure\x1b[0m Traceback (most recent call last)",
                   "----> 1 check.close(out, expected)", "CheckFailure: attention: Your scores are not divided by √d_k."])]
    validator = course_lab.MessageFirstValidator()
    raw = validator._extract_error(cell)
    shown = course_lab.message_first({"source": cell.source, "error": "", "raw_error": raw})
    assert shown["source"].splitlines()[0] == "CheckFailure: attention: Your scores are not divided by √d_k."
    assert "expected 0.67, got 0.88" in shown["source"]
    error = shown["error"]
    assert error.index("The test cell:") < error.index("check.close(out, expected)") < error.index("Traceback")
    assert course_lab.SPLIT not in shown["raw_error"] and course_lab.SPLIT not in error
    # an error without a message (the unanswered stub) and a partial score without an exception
    cell.outputs[0].evalue = ""
    cell.outputs[0].ename = "NotImplementedError"
    assert course_lab.message_first({"source": "x", "error": "", "raw_error": validator._extract_error(cell)})[
        "source"] == "NotImplementedError"
    partial = {"source": "x", "error": "Partial credit", "raw_error": "Partial credit"}
    assert course_lab.message_first(partial) == partial


# --------------------------------------------------------------------------------------------------------------
# Issue 35: the glued numbers as jupyterlab-myst's inline expressions in the Lab, the kernel's metadata up front
# --------------------------------------------------------------------------------------------------------------
def test_every_chapters_glue_and_cite_roles_become_what_the_lab_shows_and_back_exactly():
    import re
    labels = course_lab.citation_labels(REPO / "book" / "references.bib")
    assert labels["vaswani2017attention"] == ("Vaswani et al.", "2017") and labels["dao2022flashattention"][0] == "Dao et al."
    for chapter in sorted((REPO / "book").glob("*.md")):
        text = chapter.read_text(encoding="utf-8")
        lab = course_lab.cite_to_link(course_lab.glue_to_eval(text), labels)
        assert "{glue:text}" not in lab, f"{chapter.name}: a glue role the Lab would show raw"
        assert lab.count('{eval}`glued("') == text.count("{glue:text}")
        # every citation is a link; what is left of the role sits only in the link's title
        roles = len(re.findall(r"\{cite(:[pt])?\}`", text))
        assert lab.count('](appendix/references.md "{cite') == roles, chapter.name
        assert len(re.findall(r'(?<!")\{cite(:[pt])?\}`', lab)) == 0, chapter.name
        assert course_lab.link_to_cite(course_lab.eval_to_glue(lab)) == text, chapter.name
    assert course_lab.cite_to_link("{cite:t}`vaswani2017attention` and {cite:p}`bahdanau2015neural,luong2015effective`",
                                   labels) == (
        '[Vaswani et al. (2017)](appendix/references.md "{cite:t}`vaswani2017attention`") and '
        '[(Bahdanau et al., 2015; Luong et al., 2015)](appendix/references.md '
        '"{cite:p}`bahdanau2015neural,luong2015effective`")')


def test_a_chapter_in_the_lab_says_glued_and_is_saved_with_its_roles(manager, tmp_path):
    before = (tmp_path / CHAPTER).read_bytes()
    nb = _run(manager.get(CHAPTER, content=True, type="notebook"))["content"]
    prose = "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "{glue:text}" not in prose and '{eval}`glued("ch3_var_4:.1f")`' in prose
    # Run All: jupyterlab-myst keeps each expression's result in the cell's metadata; autosave leaves the file
    cell = next(c for c in nb["cells"] if "glued(" in c["source"])
    cell["metadata"]["user_expressions"] = [{"expression": 'glued("ch3_var_4:.1f")',
                                             "result": {"status": "ok", "data": {"text/plain": "4.0"}}}]
    _run(manager.save({"type": "notebook", "format": "json", "content": nb}, CHAPTER))
    assert (tmp_path / CHAPTER).read_bytes() == before
    # an edit is written with the book's roles, without the results
    cell["source"] += "\n\nA learner's note."
    _run(manager.save({"type": "notebook", "format": "json", "content": nb}, CHAPTER))
    after = (tmp_path / CHAPTER).read_text()
    assert "A learner's note." in after and "{eval}" not in after and "user_expressions" not in after
    assert after.count("{glue:text}") == before.decode().count("{glue:text}")


def test_a_chapter_comes_with_the_metadata_its_kernel_will_report(manager):
    """JupyterLab sets these when the kernel starts; equal values leave the tab without the unsaved mark."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager
    meta = _run(manager.get(CHAPTER, content=True, type="notebook"))["content"]["metadata"]
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert meta["kernelspec"] == {"name": "python3", "display_name": spec.display_name, "language": "python"}
    assert meta["language_info"] == IPythonKernel.language_info


def test_the_kernels_glued_formats_as_the_book_does(tmp_path):
    """kernel_startup.py in an IPython shell: what myst_nb's glue stores, formatted as {glue:text} does."""
    import subprocess
    script = f"""
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.safe_execfile({str(REPO / "scripts" / "lab" / "kernel_startup.py")!r}, shell.user_ns, raise_exceptions=True)
shell.run_cell('from myst_nb import glue; glue("r", 0.123456, display=False); glue("n", 511.4); glue("s", "ab")')
glued = shell.user_ns["glued"]
print([repr(glued(r)) for r in ("r:.2f", "r:.1e", "n:.0f", "n", "s")])
try:
    glued("missing:.2f")
except KeyError as err:
    print(err)
"""
    import os
    env = dict(os.environ, JPY_SESSION_NAME=str(REPO / "book" / CHAPTER))  # a chapter's kernel in the Lab
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == str(["0.12", "1.2e-01", "511", "511.4", "ab"]), out.stdout
    assert "nothing is glued under 'missing' yet: run the cells above this one first" in lines[-1], out.stdout
    # an exercise's kernel, or a Python outside the Lab's notebooks: nothing defined, the learner's own startup runs
    theirs = tmp_path / "their_startup.py"
    theirs.write_text("mine = 42\n")
    for session in ("notebooks/03_self_attention/03_self_attention.ipynb", ""):
        env = dict(os.environ, JPY_SESSION_NAME=session, COURSE_PYTHONSTARTUP=str(theirs))
        check = script.split("shell.run_cell")[0] + "print(sorted(k for k in ('glued', 'mine') if k in shell.user_ns))"
        out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
        assert out.stdout.strip().splitlines()[-1] == "['mine']", (session, out.stdout, out.stderr)
