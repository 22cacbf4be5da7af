"""Grade a small example class of exercise 3 and copy its mistake report into the book.

    python scripts/example_class.py COURSE_DIR [--jobs N]

Builds a throw-away course in ``COURSE_DIR`` (must not exist) from the tests' fixtures (grader/fixtures/):
``make_class``'s correct, chatty, unanswered and broken submissions and its correct styles, the independent
correct and wrong answers of ``similarity_corpus/``, two disguised copies of tfmlib's
``scaled_dot_product_attention`` and a disguised copy of a classmate; grades them with ``scripts/grade.py`` and
copies ``mistakes.png`` to ``book/_static/mistakes_03_self_attention.png`` (the figure of the instructor guide).
Minutes.
"""
from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "grader"))     # the grader and its fixtures (grader/fixtures/) beside this script
A = "03_self_attention"
IDS = {"scaled_dot_product_attention": "sdpa", "causal_mask": "causal", "self_attention": "self_attention"}
HEADER = "import math\nimport torch\nimport torch.nn.functional as F\n\n"


def build(course: Path) -> None:
    import nbformat

    from fixtures import answers as corpus
    from fixtures import make_class as generator
    from fixtures import disguise as disguises
    from tfmgrader.notebooks import answered

    STYLES, EXTRA_CORRECT, WRONG = corpus.STYLES, corpus.EXTRA_CORRECT, corpus.WRONG
    disguise, without_library_checks = disguises.disguise, disguises.without_library_checks
    make_class, with_answers = generator.make_class, generator.with_answers

    course.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    code = ("from nbgrader.apps import NbGraderAPI\nfrom nbgrader.coursedir import CourseDirectory\n"
            "from traitlets.config.loader import PyFileConfigLoader\n"
            "cfg = PyFileConfigLoader('nbgrader_config.py', path='.').load_config()\ncfg.CourseDirectory.root = '.'\n"
            "api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)\n"
            f"r = api.generate_assignment({A!r}, force=True)\nassert r['success'], r.get('error')\n")
    subprocess.run([sys.executable, "-c", code], cwd=course, env=env(), check=True)
    kinds = {"correct-plain", "correct-chatty", "wrong-unanswered", "wrong-first", "wrong-last"}
    make_class(course, [A], kinds={A: kinds | {f"correct-style-{s}" for s in STYLES[A]}})
    good = answered(nbformat.read(course / "notebooks" / A / f"{A}.ipynb", as_version=4),
                    nbformat.read(course / "solutions" / A / f"{A}.ipynb", as_version=4))
    subs = {f"03-{name}": {IDS[f]: HEADER + src for f, src in functions.items()}
            for name, functions in {**EXTRA_CORRECT[A], **WRONG[A]}.items()}
    text = (ROOT / "tfmlib" / "attention.py").read_text()
    node = next(n for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == "scaled_dot_product_attention")
    tfmlib_sdpa = without_library_checks(ast.get_source_segment(text, node))
    for how in ("rename", "all"):
        subs[f"03-copy-tfmlib-{how}"] = {"sdpa": HEADER + disguise(tfmlib_sdpa, "scaled_dot_product_attention", how)}
    subs["03-copy-of-row-loop"] = {IDS[f]: HEADER + disguise(src, f, "all", 3)
                                   for f, src in EXTRA_CORRECT[A]["row-loop"].items()}
    for student, answers in subs.items():
        folder = course / "submitted" / student / A
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(with_answers(good, answers), folder / f"{A}.ipynb")


def env() -> dict:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if args.course.exists():
        raise SystemExit(f"{args.course} exists: give a new folder")
    build(args.course.resolve())
    subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), A, "--course", str(args.course),
                    "--jobs", str(args.jobs)], env=env(), check=True)
    figure = args.course / "grading" / A / "mistakes.png"
    shutil.copy(figure, ROOT / "book" / "_static" / f"mistakes_{A}.png")
    print(f"copied {figure} to book/_static/mistakes_{A}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
