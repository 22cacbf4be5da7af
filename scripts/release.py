"""Regenerate notebooks/ (the learners' notebooks) from solutions/ with nbgrader — run by `make release`.

nbgrader's `generate_assignment` runs in a temporary course directory (a copy of solutions/ and of the
repository's nbgrader_config.py), so no gradebook or other nbgrader state is left in the repository; then
each released assignment folder replaces the one in notebooks/.  The output depends on solutions/ only
(nbgrader writes sorted JSON, fixed cell ids, checksums of the cells' text): running it twice gives the same
bytes, and tests/book/test_exercises.py checks that notebooks/ is up to date.

Usage:  python scripts/release.py [--check] [ASSIGNMENT ...]
  --check   regenerate into a temporary folder and exit 1 if notebooks/ differs (changes nothing)
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("01_rnn_limits", "02_attention", "03_self_attention", "04_multi_head",
               "05_positions", "06_encoder_decoder", "07_efficiency", "08_scaling_laws", "09_modern_gpt")


def load_config(root: Path):
    """The repository's nbgrader configuration, with the course root moved to ``root``."""
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    cfg.CourseDirectory.root = str(root)
    return cfg


def make_course(root: Path, assignments=ASSIGNMENTS) -> None:
    """Lay out a throw-away nbgrader course at ``root``: the config and a copy of solutions/."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    for name in assignments:
        shutil.copytree(REPO / "solutions" / name, root / "solutions" / name,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))


def generate(out_dir: Path, assignments=ASSIGNMENTS) -> list[Path]:
    """Run nbgrader generate_assignment for ``assignments`` and write the releases into ``out_dir``."""
    # nbgrader creates its gradebook with alembic, which it must find on PATH.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    from nbgrader.apps import NbGraderAPI

    written = []
    with tempfile.TemporaryDirectory(prefix="nbgrader-release-") as tmp:
        course = Path(tmp) / "course"
        make_course(course, assignments)
        api = NbGraderAPI(config=load_config(course))
        for name in assignments:
            result = api.generate_assignment(name, force=True, create=True)
            if not result["success"]:
                raise RuntimeError(f"nbgrader generate_assignment {name} failed:\n{result.get('error', '')}\n"
                                   f"{result.get('log', '')}")
            target = out_dir / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(course / "notebooks" / name, target)
            written.extend(sorted(target.rglob("*.ipynb")))
    return written


def differences(a: Path, b: Path) -> list[str]:
    """Relative paths of files that differ between two release folders (or exist in one only)."""
    files = lambda d: {p.relative_to(d) for p in d.rglob("*") if p.is_file()}  # noqa: E731
    fa, fb = files(a), files(b)
    out = sorted(str(p) for p in fa ^ fb)
    out += sorted(str(p) for p in fa & fb if not filecmp.cmp(a / p, b / p, shallow=False))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether notebooks/ is up to date")
    parser.add_argument("assignments", nargs="*", default=list(ASSIGNMENTS))
    args = parser.parse_args(argv)
    unknown = sorted(set(args.assignments) - set(ASSIGNMENTS))
    if unknown:
        parser.error(f"unknown assignments {unknown}; known: {', '.join(ASSIGNMENTS)}")
    if args.check:
        with tempfile.TemporaryDirectory(prefix="release-check-") as tmp:
            generate(Path(tmp), args.assignments)
            diff = [d for name in args.assignments for d in differences(Path(tmp) / name, REPO / "notebooks" / name)]
        if diff:
            print("notebooks/ is out of date with solutions/ (run `make release`):\n  " + "\n  ".join(diff))
            return 1
        print("notebooks/ is up to date.")
        return 0
    for path in generate(REPO / "notebooks", args.assignments):
        print("released", path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
