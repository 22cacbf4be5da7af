"""Real text with no download and nothing copied into the repository — chapter 9.

Two sources, both already on the learner's machine:

- the course's own pages, ``book/*.md`` then ``book/appendix/*.md`` (sorted by name), turned into plain prose
  by ``markdown_to_text``: code cells, listings, maths blocks, tables and MyST markup go, the sentences stay;
- optionally the docstrings of ``STDLIB_MODULES``, a fixed list of Python standard-library modules, read with
  ``inspect`` from the running interpreter: each module's docstring, then those of its public functions and
  classes (and their public methods) in alphabetical order.  The same Python version gives the same text.

A *document* is one section of a page (the text under one ``#``/``##`` heading) or one module's docstrings.
``build_corpus`` splits the documents, never the text inside one, into training and validation sets: in the
fixed order above, every ``val_every``-th document goes to validation.
"""
from __future__ import annotations

import importlib
import inspect
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BOOK_GLOBS = ("book/*.md", "book/appendix/*.md")
# Text-processing and data-structure modules whose docstrings are mostly English prose.  Order matters.
STDLIB_MODULES = ("argparse", "bisect", "calendar", "collections", "contextlib", "csv", "dataclasses", "datetime",
                  "decimal", "difflib", "enum", "fractions", "functools", "heapq", "inspect", "itertools", "json",
                  "logging", "pathlib", "pickle", "random", "re", "shutil", "statistics", "string", "subprocess",
                  "tarfile", "textwrap", "threading", "typing", "unittest", "zipfile")
# MyST directives whose body is prose worth keeping; every other fenced block (code, listings, figures) goes.
PROSE_DIRECTIVES = {"admonition", "note", "tip", "warning", "important", "seealso", "glossary", "dropdown"}

_FENCE = re.compile(r"^(`{3,}|:{3,})\s*(\{([\w:-]+)\})?")
_ROLE_DROP = re.compile(r"\{(glue(:\w+)?|cite(:\w+)?|numref|eq)\}`[^`]*`")
_ROLE_TEXT = re.compile(r"\{(ref|doc|term|download)\}`([^`<]*?)\s*(<[^`]*>)?`")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MATH = re.compile(r"\$([^$]+)\$")
_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "theta", "lambda", "mu", "pi", "sigma", "tau", "omega"}


def _plain_math(tex: str) -> str:
    """Inline maths as readable text: Greek letters by name, other commands and braces dropped."""
    tex = re.sub(r"\\([A-Za-z]+)", lambda m: m.group(1) if m.group(1) in _GREEK else " ", tex)
    return re.sub(r"\s+", " ", re.sub(r"[{}\\]", "", tex)).strip()


@dataclass(frozen=True)
class Document:
    """One document of the corpus: where it comes from (``book/05_positions.md#Rotary positions``,
    ``stdlib:json``) and its plain text."""
    name: str
    text: str


def _inline(line: str) -> str:
    """One line of prose without MyST roles, links, inline-code backticks, emphasis and inline maths signs."""
    line = _ROLE_DROP.sub("", line)
    line = _ROLE_TEXT.sub(lambda m: m.group(2) or (m.group(3) or "").strip("<>"), line)
    line = _LINK.sub(r"\1", line)
    line = re.sub(r"\*\*|__|`", "", line)
    line = re.sub(r"(?<!\w)\*(?=\S)|(?<=\S)\*(?!\w)", "", line)
    line = _MATH.sub(lambda m: _plain_math(m.group(1)), line).replace("$", "")
    return re.sub(r"[ \t]{2,}", " ", line).strip()


def markdown_to_text(md: str) -> list[tuple[str, str]]:
    """A MyST page → its sections as (heading, plain text): the prose only, one paragraph per line."""
    lines = md.splitlines()
    if lines and lines[0].strip() == "---":                      # front matter
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), 0)
        lines = lines[end + 1:]
    sections, heading, paras, para = [], "", [], []
    fences = []                                                  # open fences: (marker, keep its body?)

    def end_para():
        if para:
            paras.append(" ".join(para))
            para.clear()

    def end_section():
        end_para()
        if paras:
            sections.append((heading, "\n".join(paras)))
        paras.clear()

    in_math = False
    for raw in lines:
        line = raw.strip()
        m = _FENCE.match(line)
        if m and fences and line == fences[-1][0]:               # the closing fence of the innermost block
            fences.pop()
            end_para()
            continue
        if m and (not fences or fences[-1][1]) and (m.group(2) or line.startswith("```")):
            end_para()
            fences.append((m.group(1), (m.group(3) or "") in PROSE_DIRECTIVES))
            continue
        if fences and not fences[-1][1]:
            continue
        if line.startswith("$$"):
            end_para()
            in_math = not (in_math or line.endswith("$$") and len(line) > 2)
            continue
        if in_math:
            continue
        if not line or line.startswith((":", "|", "<!--", "(")) and (not line.startswith("(") or line.endswith(")=")):
            end_para()
            continue
        if line.startswith("#"):
            if line.lstrip("#").startswith(" ") and len(line) - len(line.lstrip("#")) <= 2:
                end_section()
                heading = _inline(line.lstrip("#"))
            else:
                end_para()
                paras.append(_inline(line.lstrip("#")))
            continue
        line = re.sub(r"^([-*+]|\d+\.)\s+", "", line)
        para.append(_inline(line))
    end_section()
    return sections


def course_documents(root: Path | str | None = None) -> list[Document]:
    """Every section of the course's pages under ``root`` (default: this repository), in a fixed order."""
    root = Path(root) if root is not None else REPO
    paths = [p for pattern in BOOK_GLOBS for p in sorted(root.glob(pattern))]
    if not paths:
        raise ValueError(f"no pages matching {BOOK_GLOBS} under {root}")
    docs = []
    for path in paths:
        for heading, text in markdown_to_text(path.read_text(encoding="utf-8")):
            docs.append(Document(f"{path.relative_to(root).as_posix()}#{heading}", text))
    return docs


def _public_members(obj, module_name: str):
    for name, member in sorted(vars(obj).items()):
        if name.startswith("_") or not (inspect.isclass(member) or inspect.isfunction(member)):
            continue
        if getattr(member, "__module__", None) == module_name:
            yield name, member


def stdlib_documents(modules=STDLIB_MODULES) -> list[Document]:
    """One document per module: its docstring, then its public functions', classes' and methods' docstrings."""
    docs = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        parts = [inspect.getdoc(module) or ""]
        with warnings.catch_warnings():          # reading deprecated members (typing.io, …) warns; we only read
            warnings.simplefilter("ignore", DeprecationWarning)
            for name, member in _public_members(module, module_name):
                parts.append(inspect.getdoc(member) or "")
                if inspect.isclass(member):
                    parts += [inspect.getdoc(m) or "" for _, m in _public_members(member, module_name)]
        docs.append(Document(f"stdlib:{module_name}", "\n\n".join(p for p in parts if p)))
    return docs


@dataclass(frozen=True)
class Corpus:
    """The training and validation documents; ``train_text`` and ``val_text`` join each set with blank lines."""
    train: list
    val: list

    @property
    def train_text(self) -> str:
        return "\n\n".join(d.text for d in self.train)

    @property
    def val_text(self) -> str:
        return "\n\n".join(d.text for d in self.val)


def build_corpus(root: Path | str | None = None, stdlib: bool = False, val_every: int = 10) -> Corpus:
    """The course's pages (and with ``stdlib`` the standard library's docstrings), split by document:
    documents number val_every − 1, 2·val_every − 1, … (counting from 0, in the fixed order) are validation."""
    if not isinstance(val_every, int) or val_every < 2:
        raise ValueError(f"val_every must be an int >= 2, got {val_every!r}")
    docs = course_documents(root) + (stdlib_documents() if stdlib else [])
    return Corpus([d for i, d in enumerate(docs) if i % val_every != val_every - 1],
                  [d for i, d in enumerate(docs) if i % val_every == val_every - 1])
