"""Which files of a submission reach the grading kernel, and what the others were.

nbgrader copies everything a learner submitted (beside the notebook) into ``autograded/<student>/<assignment>``,
and a Python kernel imports from its working folder.  The grading kernel therefore never works in that folder
but in a private copy (``sandbox_kernel.make_scratch``) that holds only the files the assignment released:

- the assignment's notebooks, as the gradebook knows them, and
- the files of the released assignment (``<release_directory>/<assignment>/``, without the course's
  ``CourseDirectory.ignore`` patterns), which nbgrader's autograde has already replaced with the
  instructor's own copies.

Everything else a learner handed in is withheld from the kernel and reported (``classify``):

- *importable or hidden* files flag the submission: Python code and its compiled or packed forms (``.py``,
  ``.pyc``, ``.so``, ``.zip`` …), a text ``.pth`` file, ``sitecustomize``/``usercustomize``, any file of a
  package folder, dotfiles, links and other non-regular files, and any file of a kind not listed below;
- an honest learner's *stray files* are listed without changing the score or the status: Jupyter's
  ``.ipynb_checkpoints/``, ``__pycache__/``, the desktop's ``.DS_Store``/``Thumbs.db``, other notebooks,
  and data: text, tables, images, arrays and PyTorch checkpoints (``.pt``, ``.ckpt``, and a ``.pth`` that
  holds a checkpoint's zip or pickle data rather than Python's path-configuration text).

Nothing here follows a link: files are listed and read with ``lstat``/``O_NOFOLLOW``.
"""
from __future__ import annotations

import fnmatch
import json
import os
import stat
from pathlib import Path, PurePosixPath

ALLOWED_NAME = "allowed.json"       # in the grader's private folder (sandbox_kernel.log_folder)
NBGRADER_OWN = {"timestamp.txt"}    # written by nbgrader collect: neither the learner's nor the kernel's
HONEST_FOLDERS = {".ipynb_checkpoints", "__pycache__"}
HONEST_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}
DATA_SUFFIXES = {".ipynb", ".txt", ".md", ".csv", ".tsv", ".json", ".jsonl", ".yaml", ".yml", ".log", ".png",
                 ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".html", ".npy", ".npz", ".pt", ".ckpt", ".safetensors"}
CHECKPOINT_MAGIC = (b"PK\x03\x04", b"\x80")     # torch.save: a zip archive, or (older) a pickle
LISTED = 20                                     # names shown in a report line


def allowed_files(release: Path | None, notebooks: list[str], ignore: list[str] = ()) -> set[str]:
    """The relative paths that may reach the kernel: ``notebooks`` (names without ``.ipynb``, from the
    gradebook) and every regular file of the released assignment folder ``release`` (None or missing:
    none), except those matching ``ignore`` and nbgrader's own ``timestamp.txt``."""
    names = {f"{n}.ipynb" for n in notebooks}
    if release is not None and release.is_dir():
        for rel, st in walk(release):
            parts = PurePosixPath(rel).parts
            if stat.S_ISREG(st.st_mode) and not any(fnmatch.fnmatch(p, g) for p in parts for g in ignore):
                names.add(rel)
    return names - NBGRADER_OWN


def walk(folder: Path):
    """``(relative posix path, lstat)`` of every entry below ``folder`` that is not a folder (links are
    listed, never followed); empty folders are not listed."""
    folder = Path(folder)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                yield path.relative_to(folder).as_posix(), st


def classify(path: Path, rel: str, st: os.stat_result) -> str:
    """``""`` for an honest learner's stray file, else why it flags the submission (a few words)."""
    parts = PurePosixPath(rel).parts
    if stat.S_ISLNK(st.st_mode):
        return "a link"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if any(p in HONEST_FOLDERS for p in parts[:-1]) or parts[-1] in HONEST_NAMES:
        return ""
    if any(p.startswith(".") for p in parts):
        return "a hidden file"
    stem, suffix = os.path.splitext(parts[-1])
    if stem in ("sitecustomize", "usercustomize"):
        return "Python start-up code"
    if suffix == ".pth":
        return "" if head(path, 4).startswith(CHECKPOINT_MAGIC) else "a Python path-configuration file"
    if suffix.lower() in DATA_SUFFIXES:
        return ""
    if suffix in (".py", ".pyw", ".pyc", ".pyo"):
        return "Python code"
    if suffix in (".so", ".pyd", ".dylib", ".dll"):
        return "a compiled extension"
    return "a file Python could load, or of a kind the grader does not know"


def head(path: Path, n: int) -> bytes:
    """The first ``n`` bytes of a regular file, read without following a link (b"" when it cannot be)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, n)
    finally:
        os.close(fd)


def inventory(folders: list[Path], allowed: set[str], skip: set[str] = frozenset()) -> tuple[dict, list[str]]:
    """What the learner handed in beyond ``allowed``, over ``folders`` (normally the submitted folder, where
    links are still links): ``({name: why it flags}, [honest stray names])``; an allowed name that is a link
    or not a regular file flags too."""
    flagged, stray = {}, set()
    for folder in folders:
        if folder is None or not Path(folder).is_dir():
            continue
        for rel, st in walk(Path(folder)):
            if rel in NBGRADER_OWN or rel in skip or rel in flagged:
                continue        # the first folder (what the learner handed in) says what a name was
            why = classify(Path(folder) / rel, rel, st)
            if rel in allowed:
                if why in ("a link", "not a regular file"):
                    flagged[rel] = why
            elif why:
                flagged[rel] = why
            else:
                stray.add(rel)
    return flagged, sorted(stray - set(flagged))


def flag_message(flagged: dict[str, str]) -> str:
    """One report line naming the withheld files (with why, the first ``LISTED`` of them)."""
    items = [f"{name} ({why})" for name, why in sorted(flagged.items())]
    more = f", and {len(items) - LISTED} more" if len(items) > LISTED else ""
    return ("files the assignment did not release were submitted beside the notebook and withheld from the "
            "grading kernel: " + ", ".join(items[:LISTED]) + more)


def write_allowed(private: Path, names: set[str]) -> None:
    """The allow-list for the kernel's launcher, in the grader's private folder."""
    (Path(private) / ALLOWED_NAME).write_text(json.dumps(sorted(names)))


def read_allowed(private: Path, workdir: Path) -> list[str]:
    """The allow-list the grader wrote; without one (a kernel started outside ``SandboxedExecute``), the
    notebooks at the top of ``workdir``."""
    path = Path(private) / ALLOWED_NAME
    if path.is_file():
        return [n for n in json.loads(path.read_text()) if isinstance(n, str)]
    return sorted(rel for rel, st in walk(workdir) if "/" not in rel and rel.endswith(".ipynb"))


def safe_relative(rel: str) -> bool:
    p = PurePosixPath(rel)
    return bool(p.parts) and not p.is_absolute() and ".." not in p.parts and "" not in p.parts


def copy_allowed(workdir: Path, scratch: Path, names: list[str]) -> list[str]:
    """Copy the regular files ``names`` (relative paths) of ``workdir`` into ``scratch``, never through a
    link (neither the file nor a folder above it); returns the names copied."""
    copied = []
    for rel in names:
        if not safe_relative(rel):
            continue
        src, parts = Path(workdir), PurePosixPath(rel).parts
        if any(os.path.islink(Path(workdir, *parts[:i])) for i in range(1, len(parts))):
            continue
        try:
            fd = os.open(src / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                continue
            dest = Path(scratch) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as out:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
            os.chmod(dest, 0o644)
        copied.append(rel)
    return copied


def submission_view(config, resources, workdir: Path,
                    released: tuple[str, ...]) -> tuple[set[str], dict[str, str], list[str]]:
    """For the notebook nbgrader is autograding (``resources``): ``(allowed, flagged, stray)`` — the names that
    may reach the kernel, and what the learner submitted beyond them (see ``inventory``), looked up in the
    course's release and submitted folders (``config``: nbgrader's configuration) and ``released``, the
    assignment's notebooks as the gradebook knows them (``preprocessors.assignment_notebooks``)."""
    from nbgrader.coursedir import CourseDirectory

    nbg = resources.get("nbgrader", {})
    assignment, student = nbg.get("assignment"), nbg.get("student")
    coursedir = CourseDirectory(config=config)
    if not coursedir.root or not Path(coursedir.root, coursedir.submitted_directory).is_dir():
        coursedir.root = str(workdir.parents[2]) if len(workdir.parents) > 2 else str(workdir)
    notebooks = ([nbg["notebook"]] if nbg.get("notebook") else []) + list(released)
    release = Path(coursedir.format_path(coursedir.release_directory, ".", assignment)) if assignment else None
    allowed = allowed_files(release, notebooks, list(coursedir.ignore))
    submitted = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment)) \
        if assignment and student else None
    from tfmcheck import TRACE_NAME
    # What the learner handed in; the autograded folder also holds the instructor's files nbgrader restored.
    folder = submitted if submitted is not None and submitted.is_dir() else workdir
    flagged, stray = inventory([folder], allowed, skip={TRACE_NAME})
    return allowed, flagged, stray
