"""Which graded functions a built site shows unfolded: `python scripts/spoilers.py [_build/html]`.

The book explains every graded function but keeps the library's listing of one behind a closed, labelled
spoiler after the chapter's link to its exercise (issue 17). This module finds the bodies a learner is graded
on and looks for them in the pages a reader sees without opening anything:

- The graded functions are the functions defined in the answer cells of ``solutions/*/*.ipynb`` (nbgrader
  cells with ``solution: true`` whose code holds ``### BEGIN SOLUTION``). Each has up to two bodies: the
  solution's (the lines between the markers) and, when ``tfmlib`` defines a function of the same name, the
  library's (its statements after the docstring).
- A body is compared line by line with comments and all whitespace removed, so a listing, a printed
  ``inspect.getsource`` or a hand copy with other spacing all count.
- A page's visible text is its HTML text outside ``<script>``, ``<style>`` and ``<template>`` and outside
  every closed ``<details>`` element (a Sphinx-design dropdown, a hidden input cell); the ``<summary>`` of a
  closed ``<details>`` stays visible, it is the label.
- A body is *shown* on a page when its lines appear there in order, one after another, or when at least
  ``COVERAGE`` of its distinctive lines (``MIN_LINE`` characters or more) appear in one code block (one
  ``<pre>``), which catches a copy with a line changed, added or moved. (Across a whole page, common lines
  from unrelated cells, ``for t in range(x.shape[1]):``, would add up to a body that is not there.)

Exit status: 0 when no page shows a graded body, 1 when one does (each is listed), 2 on a usage error.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
# A line shorter than this (whitespace removed) is too common to say anything: `return mask`, `m = m_new`.
MIN_LINE = 12
# The share of a body's distinctive lines that, found on one page, makes the page show the body.
COVERAGE = 0.75


@dataclass(frozen=True)
class Body:
    """One body of a graded function: where it comes from and its normalised lines."""

    function: str
    source: str  # "solutions/03_self_attention" or "tfmlib/attention.py"
    lines: tuple[str, ...]

    @property
    def distinctive(self) -> set[str]:
        return {line for line in self.lines if len(line) >= MIN_LINE}


# ------------------------------------------------------------------------------------------------------
# Normalising code


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment`; a `#` inside a string literal is kept."""
    quote = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
        i += 1
    return line


def normalise(text: str) -> list[str]:
    """The non-empty lines of `text`, each without its comment and without any whitespace."""
    out = []
    for line in text.splitlines():
        line = "".join(_strip_comment(line).split())
        if line:
            out.append(line)
    return out


def _without_comments(source: str) -> str:
    """Python source with its comments blanked by the tokenizer (the text itself when it does not tokenize)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source
    lines = source.splitlines(keepends=True)
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            (row, col), (_, end) = tok.start, tok.end
            lines[row - 1] = lines[row - 1][:col] + " " * (end - col) + lines[row - 1][end:]
    return "".join(lines)


# ------------------------------------------------------------------------------------------------------
# The graded functions and their bodies


def _solution_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text(encoding="utf8"))["cells"]
    return ["".join(c["source"]) for c in cells
            if c["cell_type"] == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")
            and BEGIN in "".join(c["source"])]


def solution_bodies(root: Path = REPO) -> list[Body]:
    """The body between the solution markers of every function defined in an answer cell of solutions/."""
    bodies = []
    for notebook in sorted((root / "solutions").glob("*/*.ipynb")):
        for cell in _solution_cells(notebook):
            tree = ast.parse(cell)
            lines = cell.splitlines()
            for node in tree.body:
                if not isinstance(node, ast.FunctionDef):
                    continue
                # The END marker is a comment after the last statement, outside the node's own lines.
                own = lines[node.lineno - 1:]
                start = next((i for i, line in enumerate(own) if BEGIN in line), None)
                if start is None or start > node.end_lineno - node.lineno:
                    continue  # a helper the exercise gives, not graded
                end = next(i for i, line in enumerate(own) if END in line)
                text = textwrap.dedent("\n".join(own[start + 1:end]))
                source = notebook.parent.relative_to(root).as_posix()
                bodies.append(Body(node.name, source, tuple(normalise(_without_comments(text)))))
    if not bodies:
        raise RuntimeError(f"no graded function found in {root / 'solutions'}")
    return bodies


def library_bodies(names: set[str], root: Path = REPO) -> list[Body]:
    """The statements after the docstring of every top-level function of tfmlib/ named in `names`."""
    bodies = []
    for module in sorted((root / "tfmlib").rglob("*.py")):
        source = module.read_text(encoding="utf8")
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if not isinstance(node, ast.FunctionDef) or node.name not in names:
                continue
            statements = node.body
            if (statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant)
                    and isinstance(statements[0].value.value, str)):
                statements = statements[1:]  # the docstring: the released notebooks show the same words
            if not statements:
                continue
            text = textwrap.dedent("\n".join(lines[statements[0].lineno - 1:statements[-1].end_lineno]))
            bodies.append(Body(node.name, module.relative_to(root).as_posix(),
                               tuple(normalise(_without_comments(text)))))
    return bodies


def graded_bodies(root: Path = REPO) -> list[Body]:
    """Every body of every graded function: the solution's, then tfmlib's where it has one."""
    solutions = solution_bodies(root)
    return solutions + library_bodies({b.function for b in solutions}, root)


# ------------------------------------------------------------------------------------------------------
# What a page shows


class _VisibleText(HTMLParser):
    """The text of a page outside scripts, styles, templates and closed <details> (their summary excepted)."""

    SKIPPED = {"script", "style", "template"}
    LINE_BREAKS = {"br", "p", "div", "pre", "li", "tr", "summary", "details", "h1", "h2", "h3", "h4", "h5", "h6"}

    def __init__(self, unfold: bool = False):
        super().__init__(convert_charrefs=True)
        self.unfold = unfold      # read closed <details> too, as if every one were open
        self.parts: list[str] = []
        self.blocks: list[str] = []   # the visible text of each <pre> (a listing, a code cell, an output)
        self.pre: list[str] | None = None
        self.skipped = 0          # depth inside script/style/template
        self.closed = 0           # depth of <details> elements inside the outermost closed one
        self.summary_depth = 0    # inside the <summary> of the outermost closed <details>

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIPPED:
            self.skipped += 1
        elif tag == "details" and not self.unfold:
            if self.closed or "open" not in dict(attrs):
                self.closed += 1
        elif tag == "summary" and self.closed == 1:
            self.summary_depth += 1
        elif tag == "pre" and self.pre is None:
            self.pre = []
        if tag in self.LINE_BREAKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIPPED:
            self.skipped = max(0, self.skipped - 1)
        elif tag == "details" and self.closed:
            self.closed -= 1
        elif tag == "summary" and self.summary_depth:
            self.summary_depth -= 1
        elif tag == "pre" and self.pre is not None:
            self.blocks.append("".join(self.pre))
            self.pre = None
        if tag in self.LINE_BREAKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skipped and (not self.closed or self.summary_depth):
            self.parts.append(data)
            if self.pre is not None:
                self.pre.append(data)


def _parse(html: str, unfold: bool) -> _VisibleText:
    parser = _VisibleText(unfold)
    parser.feed(html)
    parser.close()
    return parser


def visible_text(html: str, unfold: bool = False) -> str:
    """What a reader sees of a page without opening anything folded (with `unfold`, after opening everything)."""
    return "".join(_parse(html, unfold).parts)


@dataclass
class Page:
    """A page's visible text, normalised: all its lines in order, and the lines of each code block."""

    name: str
    lines: list[str]
    blocks: list[set[str]]

    def __post_init__(self):
        self.joined = "\n" + "\n".join(self.lines) + "\n"

    @classmethod
    def from_html(cls, name: str, html: str, unfold: bool = False) -> "Page":
        parser = _parse(html, unfold)
        return cls(name, normalise("".join(parser.parts)), [set(normalise(b)) for b in parser.blocks])

    def shows(self, body: Body) -> str | None:
        """How the page shows `body` ("verbatim", "74% of its lines"), or None when it does not."""
        if not body.lines:
            return None
        if "\n" + "\n".join(body.lines) + "\n" in self.joined:
            return "verbatim"
        distinctive = body.distinctive
        if distinctive and self.blocks:
            found = max(len(distinctive & block) for block in self.blocks) / len(distinctive)
            if found >= COVERAGE:
                return f"{found:.0%} of its lines in one code block"
        return None


def read_pages(site: Path, unfold: bool = False) -> list[Page]:
    """Every HTML page under `site`, as the reader sees it (with `unfold`, with every <details> opened)."""
    pages = [Page.from_html(p.relative_to(site).as_posix(), p.read_text(encoding="utf8"), unfold)
             for p in sorted(site.rglob("*.html"))]
    if not pages:
        raise FileNotFoundError(f"no HTML page under {site}: build the book first (`make book`)")
    return pages


def shown_bodies(site: Path, bodies: list[Body] | None = None) -> list[str]:
    """One line per graded body that some page of `site` shows unfolded: page, function, source, how."""
    bodies = graded_bodies() if bodies is None else bodies
    found = []
    for page in read_pages(site):
        for body in bodies:
            how = page.shows(body)
            if how:
                found.append(f"{page.name}: {body.function} ({body.source}), {how}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", default=str(REPO / "_build" / "html"), help="the built site's html folder")
    args = parser.parse_args(argv)
    site = Path(args.site)
    if not site.is_dir():
        print(f"{site} is not a folder: build the book first (`make book`)", file=sys.stderr)
        return 2
    bodies = graded_bodies()
    found = shown_bodies(site, bodies)
    names = sorted({b.function for b in bodies})
    print(f"{len(names)} graded functions, {len(bodies)} bodies (solutions/ and tfmlib/), "
          f"{len(read_pages(site))} pages in {site}")
    for line in found:
        print("SHOWN  " + line)
    if not found:
        print("no page shows a graded function's body outside a closed <details>")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
