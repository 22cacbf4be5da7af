"""scripts/lab/course_lab.py without a server or a browser (issue 20): a chapter saved with unchanged cells is not
written, an edited one is; Validate tells exercises from other notebooks and puts the named mistake first.
The browser test in test_lab.py plays the same in a real JupyterLab."""
from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
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
