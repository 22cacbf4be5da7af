#!/usr/bin/env python
"""Calibrate the copy detection (grader/tfmgrader/similarity.py) on a split set; print its error rates.

    python scripts/similarity_calibration.py [--half tune|held-out|both] [--grid] [--k K] [--threshold T]
                                             [--min-tokens N] [--tokens ast|plain|copydetect|dolos] [--verbose]
                                             [ASSIGNMENT ...]

For each assignment of ``solutions/`` it builds, at the level of function sources (no notebooks, no nbgrader),
a class in two halves.  The window, threshold and minimum size are chosen on the **tune** half; the
**held-out** half is only reported.  Eligible settings meet a floor: in every assignment a verbatim copy of the
worked solution is flagged with it (``verbatim_flagged``); among them ``--grid`` chooses by ``choice_key``.

* tune: the copies that ``grader/fixtures/disguise.py`` generates from tfmlib and the solutions (rename,
  reorder, comment, wrap, all four; two seeds), two pairs of students where one copied the other with every
  disguise, and half of the hand-written disguised copies and of the independent answers (which half: the
  SHA-256 of the example's name, ``half_of``);
* held-out: the rest of the hand-written disguised copies (``grader/fixtures/similarity_corpus/disguised``:
  expressions split into lines, unused statements, while loops, inlined helpers, other spellings, ...; none
  made by the generator) and the rest of the independent answers (``grader/fixtures/styles``,
  ``similarity_corpus/correct`` and ``similarity_corpus/wrong``).

Each half is graded as ``similarity.analyse`` grades a class.  A copy counts as found when it is flagged and
its source is the one it was copied from (or has the same normalised code: tfmlib's code shown on the site is
tfmlib's code); an independent answer counts as a false positive when it is flagged.  Functions with fewer
than ``--min-tokens`` tokens of their own are not attributed and are counted apart.  ``--grid`` prints the
rates of the tune half for several windows, thresholds and minimum sizes (the defaults of similarity.py are
the row chosen from it); ``--tokens plain`` is the normalisation before issue 32 (names, layout and the order
of independent assignments only), ``copydetect`` copydetect's own tokeniser on top of it, ``dolos`` Dolos
(npm ``@dodona/dolos-lib``, installed under $DOLOS_DIR, not a dependency of the course) in place of ours, on the
same units (``scripts/dolos_pairs.mjs``; ``--k`` is then Dolos's k-gram length).  ``round 2``: the hand-written
copies marked ``"round": 2`` in ``disguised/index.json``, written and committed before any result on them was seen;
``round 4``: copies (``"round": 4``) and independent answers (styles ``r4-...``) written by two helpers who never saw
the detector, its tests or the corpus (the copier read only the course's code, the other only the contracts), and
measured once.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(ROOT / "grader"))     # the grader and its fixtures beside this script

from fixtures import answers as _answers  # noqa: E402
from fixtures import disguise as _disguise  # noqa: E402
from tfmgrader import similarity as sim  # noqa: E402

STYLES, EXTRA_CORRECT, WRONG = _answers.STYLES, _answers.EXTRA_CORRECT, _answers.WRONG
KINDS, disguise, without_library_checks = _disguise.KINDS, _disguise.disguise, _disguise.without_library_checks
DISGUISED = ROOT / "grader" / "fixtures" / "similarity_corpus" / "disguised"

ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
SEEDS = (0, 1)
HALVES = ("tune", "held-out")
TARGET_FOUND, TARGET_FALSE = 0.90, 0.02      # issue 32, on the held-out half
BLIND = "-r4-"       # independent answers of round 4 (their style names start with r4-)
K_DEFAULT = sim.K
MARKERS_RE = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n", re.M)   # nbgrader's, not in a learner's copy
DOLOS_WINDOW = 1          # Dolos's k-grams per winnowing window (--dolos-window)


@dataclass
class Expected:
    role: str            # "independent", "copy" or "original"
    source: dict         # function -> what it was copied from: a label, or a student
    kind: str = ""       # "generated", "hand-written", "classmate"; "" for independent answers
    round: int = 0       # hand-written copies: 1 (written with the normalisation), 2 (written before re-tuning)


def half_of(assignment: str, name: str) -> str:
    """The half of a hand-written copy or an independent answer: fixed by the SHA-256 of its name (its file or
    folder name under the assignment), so that adding an example moves no other one and no result chooses it."""
    return HALVES[hashlib.sha256(f"{assignment}/{name}".encode()).digest()[0] % 2]


def independent_answers(assignment: str, graded: list[str]) -> dict[str, dict[str, str]]:
    """``{student: {function: source}}``: the styles, the extra correct styles and the wrong answers."""
    out = {}
    for style, cells in STYLES.get(assignment, {}).items():
        defs = sim.cell_functions(list(cells.values()))
        out[f"style-{style}"] = {n: sim.unit_source(sim.unit(n, defs, set(graded))) for n in graded if n in defs}
        # the other graded functions the style defines, so that its calls of them can be inlined
        out[f"style-{style}"] = {n: "\n\n".join(cells.values()) for n in out[f"style-{style}"]}
    for style, functions in EXTRA_CORRECT.get(assignment, {}).items():
        out[f"correct-{style}"] = {n: "\n\n".join(functions.values()) for n in functions}
    for name, functions in WRONG.get(assignment, {}).items():
        out[f"wrong-{name}"] = {n: "\n\n".join(functions.values()) for n in functions}
    return out


def hand_written(assignment: str) -> dict[str, dict]:
    """``{name: entry}`` of ``disguised/index.json`` for one assignment, each with its ``code``."""
    index = json.loads((DISGUISED / "index.json").read_text(encoding="utf-8"))
    listed = {DISGUISED / a / f"{n}.py" for a, named in index.items() for n in named}
    unlisted = sorted(str(p.relative_to(DISGUISED)) for p in set(DISGUISED.glob("*/*.py")) - listed)
    if unlisted:
        raise ValueError(f"{DISGUISED}: files missing from index.json: {', '.join(unlisted)}")
    return {n: {**e, "code": (DISGUISED / assignment / f"{n}.py").read_text(encoding="utf-8")}
            for n, e in sorted(index.get(assignment, {}).items())}


def site_label(refs: list[sim.Unit], entry: dict) -> str:
    """The label of the site unit a hand-written copy names (its page and a piece of its code)."""
    found = [u.label for u in refs if u.kind == "site" and u.label.startswith(entry["page"] + ":")
             and entry["contains"] in u.source]
    if len(found) != 1:
        raise ValueError(f"{entry['page']}: {len(found)} code cells contain {entry['contains']!r}")
    return found[0]


def build_class(assignment: str, graded: list[str], refs: list[sim.Unit], half: str):
    """``({student: {function: source}}, {student: Expected})`` for one half of one assignment."""
    label = {(u.kind, u.function): u.label for u in refs if u.kind in ("tfmlib", "solution")}
    subs, expected = {}, {}
    independent = independent_answers(assignment, graded)
    solution = {u.function: u.source for u in refs if u.kind == "solution"}
    for student, functions in sorted(independent.items()):
        if half_of(assignment, student) == half:
            subs[student] = functions
            expected[student] = Expected("independent", {})
    for name, entry in hand_written(assignment).items():
        if half_of(assignment, name) != half:
            continue
        f = entry["function"]
        want = site_label(refs, entry) if entry["source"] == "site" else label[(entry["source"], f)]
        # the copier's notebook answers the other graded functions too: those the copy calls without defining
        # them are the worked solution's (without them a call of split_heads could not be inlined)
        called = {n.id for n in ast.walk(ast.parse(entry["code"])) if isinstance(n, ast.Name)}
        defined = {n.name for n in ast.parse(entry["code"]).body if isinstance(n, ast.FunctionDef)}
        others = [solution[g] for g in graded if g != f and g in called - defined and g in solution]
        subs[f"hand-{name}"] = {f: "\n\n".join([entry["code"], *others])}
        expected[f"hand-{name}"] = Expected("copy", {f: want}, "hand-written", entry.get("round", 1))
    if half != "tune":
        return subs, expected
    # two originals (the last extra correct style and the last wrong answer) are copied by classmates
    originals = [s for s in subs if s.startswith("correct-")][-1:] + [s for s in subs if s.startswith("wrong-")][-1:]
    for original in originals:
        copier = f"copy-of-{original}"
        copied = {n: sim.unit_source(sim.unit(n, sim.cell_functions([src]), set(graded)))
                  for n, src in subs[original].items()}
        subs[copier] = {n: disguise(src, n, "all", seed=7) for n, src in copied.items()}
        expected[copier] = Expected("copy", {n: original for n in subs[original]}, "classmate")
        expected[original] = Expected("original", {n: copier for n in subs[original]}, "classmate")
    for seed in SEEDS:
        for how in KINDS:
            student = f"gen-tfmlib-{how}-{seed}"
            subs[student], expected[student] = {}, Expected("copy", {}, "generated")
            for name in graded:
                lib = next((u for u in refs if u.kind == "tfmlib" and u.function == name), None)
                if lib is not None:      # the function and the helpers of tfmlib it calls, without its checks
                    text, want = without_library_checks(lib.source), lib.label
                else:
                    text, want = next(u.source for u in refs if u.kind == "solution" and u.function == name), \
                        label[("solution", name)]
                subs[student][name] = disguise(text, name, how, seed)
                expected[student].source[name] = want
            student = f"gen-solution-{how}-{seed}"
            sol = {u.function: u for u in refs if u.kind == "solution"}
            subs[student] = {n: disguise(sol[n].source, n, how, seed) for n in graded}
            expected[student] = Expected("copy", {n: sol[n].label for n in graded}, "generated")
    return subs, expected


def dolos_similarities(groups: list[dict], k: int, window: int) -> list[list]:
    """Dolos's pairs for each group (``scripts/dolos_pairs.mjs``; Dolos installed under $DOLOS_DIR)."""
    import os
    import subprocess

    if not os.environ.get("DOLOS_DIR"):
        raise SystemExit("--tokens dolos needs DOLOS_DIR: a folder where npm installed @dodona/dolos-lib")
    request = json.dumps({"options": {"kgramLength": k, "kgramsInWindow": window}, "groups": groups})
    done = subprocess.run(["node", str(ROOT / "scripts" / "dolos_pairs.mjs")], input=request, text=True,
                          capture_output=True, check=True)
    return json.loads(done.stdout)


def dolos_records(assignment: str, half: str, k: int, window: int, cache: dict) -> list[dict]:
    """``records`` with Dolos's similarity of the raw sources (Dolos does its own tokenising: tree-sitter's
    syntax nodes, names dropped) in place of ours; the same units, sources and minimum size (ours)."""
    key = (assignment, half, "dolos", k, window)
    if key in cache:
        return cache[key]
    records(assignment, half, K_DEFAULT, "ast", cache)        # the units, as ours sees them
    notebooks, graded, refs, units, expected, _ = cache[(assignment, half, "ast")]
    ignore = "\n\n".join(sim.release_cells(notebooks))
    by_label = {u.label: u for u in refs}
    groups, members = [], []
    for name in graded:
        cands = [u for u in refs if not u.function or u.function == name]
        students = [(s, us[name]) for s, us in sorted(units.items()) if name in us]
        if not students:
            continue
        files = [(c.label, c.source) for c in cands] + [(s, u.source) for s, u in students]
        groups.append({"files": [[f"f{i}", text] for i, (_, text) in enumerate(files)], "ignore": ignore,
                       "from": len(cands)})
        members.append((name, cands, students))
    pairs = dolos_similarities(groups, k, window)
    out = []
    for (name, cands, students), rows in zip(members, pairs):
        n_ref = len(cands)
        everyone = list(cands) + [u for _, u in students]
        owner = [None] * n_ref + [s for s, _ in students]
        share = {}
        for i, j, similarity, *_ in rows:
            share[(i, j)] = share[(j, i)] = similarity
        for a, (student, u) in enumerate(students, start=n_ref):
            exp = expected[student]
            want = exp.source.get(name)
            want_code = None if want is None else (by_label[want].normalised if want in by_label
                                                   else units[want][name].normalised)
            scored = []
            for b, c in enumerate(everyone):
                if b == a or share.get((a, b), 0) <= 0:
                    continue
                label = c.label if b < n_ref else owner[b]
                right = want_code is not None and (label == want or c.normalised == want_code)
                scored.append((share[(a, b)], b < n_ref, c.size, label, right))
            out.append({"student": student, "function": name, "role": exp.role, "kind": exp.kind,
                        "round": exp.round, "size": u.size, "want": want, "scored": scored})
    cache[key] = out
    return out


def records(assignment: str, half: str, k: int, mode: str, cache: dict) -> list[dict]:
    """For each graded function of one half: its role, size, and every candidate source's similarity (computed
    once per window ``k`` and normalisation)."""
    if mode == "dolos":
        return dolos_records(assignment, half, k, DOLOS_WINDOW, cache)
    key0 = (assignment, half, mode)
    if key0 not in cache:
        sim.CANONICAL = mode == "ast"
        try:
            notebooks, graded, refs = sim.references(ROOT, assignment)
            subs, expected = build_class(assignment, graded, refs, half)
            units = {s: sim.function_units(s, "student", list(dict.fromkeys(functions.values())), graded)
                     for s, functions in subs.items()}
            units = {s: {n: u for n, u in us.items() if n in subs[s]} for s, us in units.items()}
            unread = set()
            for s, us in units.items():     # what else each name may hold when run, as grade.py compares it
                cells = list(dict.fromkeys(subs[s].values()))
                try:
                    found = sim.alternate_units(s, cells, graded, us)
                except sim.TooLarge:        # past the reading budget grade.py flags the notebook, unread
                    unread.add(s)
                    continue
                for n, alternates in found.items():
                    if n in us:
                        us[n].alternates = alternates
        finally:
            sim.CANONICAL = True
        cache[key0] = (notebooks, graded, refs, units, expected, unread)
    notebooks, graded, refs, units, expected, unread = cache[key0]
    key = (assignment, half, mode, k)
    if key in cache:
        return cache[key]
    sim.CANONICAL = mode == "ast"
    try:
        fp = sim.Fingerprints(sim.release_cells(notebooks), k, "copydetect" if mode == "copydetect" else "ast")
        for u in refs:
            fp.add(u)
        for functions in units.values():
            for u in functions.values():
                fp.add(u)
                for alt in u.alternates:
                    fp.add(alt)
    finally:
        sim.CANONICAL = True
    by_label = {u.label: u for u in refs}
    out = []
    for student, functions in sorted(units.items()):
        exp = expected[student]
        for name, u in functions.items():
            want = exp.source.get(name)
            want_code = None if want is None else (by_label[want].normalised if want in by_label
                                                   else units[want][name].normalised)
            variants = []
            for v in [u, *u.alternates]:
                scored = []
                for c in refs + [o[name] for s, o in units.items() if s != student and name in o]:
                    if c.function != name and (c.function or v.orphan) or (v.orphan and c.kind == "student"):
                        continue        # an orphan: this exercise's own references only (similarity.analyse)
                    share, _ = fp.compare(v, c)
                    if c.kind != "student":          # a reference found whole, in order (similarity.closest)
                        share = max(share, fp.reference_share(v, c))
                    if share > 0:
                        right = want_code is not None and (c.label == want or c.normalised == want_code)
                        scored.append((share, c.kind != "student", c.size, c.label, right))
                variants.append((v.size, scored))
            out.append({"student": student, "function": name, "role": exp.role, "kind": exp.kind,
                        "round": exp.round, "size": u.size, "want": want, "scored": variants[0][1],
                        "variants": variants[1:], "unread": student in unread})
    cache[key] = out
    return out


def verbatim_flagged(assignment: str, k: int, threshold: float, min_tokens: int, cache: dict) -> list[str]:
    """The graded functions of ``assignment`` for which a verbatim copy of the worked solution (its answer cells
    as a learner would paste them) is flagged with the solution as its source, graded as ``similarity.analyse``
    grades a class of one.  The coverage floor of the choice: every assignment must keep at least one."""
    key = ("verbatim", assignment)
    if key not in cache:
        notebooks, graded, refs = sim.references(ROOT, assignment)
        cells = [MARKERS_RE.sub("", c) for p in notebooks for c in sim.notebook_cells(p, learner_only=True)]
        cache[key] = (notebooks, graded, refs, {"verbatim": sim.function_units("verbatim", "student", cells, graded)})
    notebooks, graded, refs, units = cache[key]
    analysis = sim.analyse(units, refs, graded, sim.release_cells(notebooks), k=k, min_tokens=min_tokens,
                           threshold=threshold)
    return [f for f in graded if (m := analysis.matches.get(("verbatim", f))) is not None and m.flagged
            and m.source is not None and m.source.kind == "solution"]


def floor_bound(assignments, k: int, cache: dict) -> int:
    """The largest minimum size at which every assignment keeps a graded function of the worked solution long
    enough to attribute (at window ``k``): the smallest, over the assignments, of its longest one."""
    out = []
    for a in assignments:
        verbatim_flagged(a, k, 1.0, 0, cache)           # the units' sizes at window k
        out.append(max(u.size for u in cache[("verbatim", a)][3]["verbatim"].values()))
    return min(out)


def covered(assignments, k: int, threshold: float, min_tokens: int, cache: dict) -> dict[str, list[str]]:
    """``{assignment: functions whose verbatim copy is flagged with the solution}`` (``verbatim_flagged``)."""
    return {a: verbatim_flagged(a, k, threshold, min_tokens, cache) for a in assignments}


def decide(r: dict, threshold: float, min_tokens: int) -> tuple[float, str, bool]:
    """(similarity, source, right) with ``similarity.closest``'s rule: the closest reference when it reaches the
    threshold, else the closest of all.  ``right``: the source copied from is among the sources the report
    names, the closest one or those listed beside it (at the threshold or above)."""
    scored = [s for s in r["scored"] if s[2] >= min_tokens]
    if not scored:
        return 0.0, "-", False
    refs = [s for s in scored if s[1]]
    best_ref = max((s[0] for s in refs), default=0.0)
    pool = refs if best_ref >= threshold else scored
    top = max(s[0] for s in pool)
    tied = [s for s in pool if s[0] == top]
    chosen = next((s for s in tied if s[4]), tied[0])
    # the report names every other source at the threshold or above beside the closest one
    named = [chosen] + ([s for s in scored if s[0] >= threshold] if top >= threshold else [])
    return top, chosen[3], any(s[4] for s in named)


def chosen_variant(r: dict, threshold: float, min_tokens: int) -> dict:
    """The record as ``similarity.analyse`` judges it: the unit the cells leave bound, unless it is not flagged and
    some other code the name may hold (``similarity.alternate_units``) is: then the most similar of those."""
    def rank(size, scored):
        similarity = decide({"scored": scored}, threshold, min_tokens)[0] if size >= min_tokens else 0.0
        return (size >= min_tokens and similarity >= threshold, similarity)
    main = (r["size"], r["scored"])
    flagged = [v for v in r.get("variants", []) if rank(*v)[0]]
    best = main if rank(*main)[0] or not flagged else max(flagged, key=lambda v: rank(*v))
    return {**r, "size": best[0], "scored": best[1]}


def evaluate(assignment: str, half: str, k: int, threshold: float, min_tokens: int, mode: str = "ast",
             cache: dict | None = None, verbose: bool = False) -> dict:
    """Counts for one half of one assignment."""
    cache = cache if cache is not None else {}
    c = {"copies": 0, "found": 0, "hand": 0, "hand_found": 0, "hand2": 0, "hand2_found": 0, "hand4": 0,
         "hand4_found": 0, "copies_short": 0, "independent": 0, "independent4": 0, "false_positives": 0,
         "false4": 0, "independent_short": 0, "misses": [], "false": []}
    for r in records(assignment, half, k, mode, cache):
        r = chosen_variant(r, threshold, min_tokens)
        short = r["size"] < min_tokens and not r.get("unread")
        similarity, label, right = decide(r, threshold, min_tokens)
        flagged = not short and similarity >= threshold
        if r.get("unread"):     # flagged for review with no source named (``similarity.TooLarge``)
            similarity, label, right, flagged = 0.0, "UNREAD (past the reading budget)", False, True
        where = f"{r['student']} {r['function']} ({r['size']} tokens): {similarity:.2f} ~ {label}"
        if r["role"] in ("copy", "original"):
            if short:
                c["copies_short"] += 1
                if r["kind"] == "hand-written":           # a hand-written copy too short to attribute is missed
                    c["hand"] += 1
                    c["hand2"] += r["round"] == 2
                    c["hand4"] += r["round"] == 4
                    c["misses"].append(f"{where} (too short; copied from {r['want']})")
                continue
            c["copies"] += 1
            c["found"] += flagged and right
            if r["kind"] == "hand-written":
                c["hand"] += 1
                c["hand_found"] += flagged and right
                c["hand2"] += r["round"] == 2
                c["hand2_found"] += r["round"] == 2 and flagged and right
                c["hand4"] += r["round"] == 4
                c["hand4_found"] += r["round"] == 4 and flagged and right
            if not (flagged and right):
                c["misses"].append(f"{where} (copied from {r['want']})")
        else:
            if short:
                c["independent_short"] += 1
                continue
            c["independent"] += 1
            c["false_positives"] += flagged
            c["independent4"] += BLIND in r["student"]
            c["false4"] += BLIND in r["student"] and flagged
            if flagged or verbose:
                c["false"].append(where + (" FLAGGED" if flagged else ""))
    return c


def totals(assignments, half, k, threshold, min_tokens, mode, cache, verbose=False) -> dict:
    total = {}
    for a in assignments:
        c = evaluate(a, half, k, threshold, min_tokens, mode, cache, verbose)
        for key, value in c.items():
            total[key] = total.get(key, 0 if not isinstance(value, list) else []) + \
                (value if not isinstance(value, list) else [f"{a}: {v}" for v in value])
    return total


MIN_TOKENS_GRID = (40, 50, 60, 70, 80, 100)


def choice_key(row) -> tuple:
    """The rule fixed before the grid is run, among the settings that meet the floor: the lowest share of
    independent functions flagged, then the most hand-written copies found, then the larger minimum size, the
    higher threshold, the longer window."""
    k, min_tokens, threshold, _, t = row
    return (t["false_positives"] / max(t["independent"], 1), -t["hand_found"], -min_tokens, -threshold, -k)


def rate(n: int, d: int) -> str:
    return f"{n}/{d} ({n / d:.0%})" if d else "0/0"


def main(argv=None) -> int:
    global DOLOS_WINDOW
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", default=ASSIGNMENTS)
    parser.add_argument("--half", choices=[*HALVES, "both"], default="both")
    parser.add_argument("--k", type=int, default=sim.K)
    parser.add_argument("--threshold", type=float, default=sim.THRESHOLD)
    parser.add_argument("--min-tokens", type=int, default=sim.MIN_TOKENS)
    parser.add_argument("--tokens", choices=["ast", "plain", "copydetect", "dolos"], default="ast",
                        help="normalisation: ours (default), without undoing disguises (plain), copydetect's, "
                             "or Dolos instead of ours (needs DOLOS_DIR; --k is Dolos's k-gram length)")
    parser.add_argument("--dolos-window", type=int, default=DOLOS_WINDOW, help="Dolos's k-grams per window")
    parser.add_argument("--grid", action="store_true", help="the tune half's rates for several settings")
    parser.add_argument("--verbose", action="store_true", help="every independent answer's closest source")
    args = parser.parse_args(argv)
    DOLOS_WINDOW = args.dolos_window
    cache: dict = {}
    if args.grid:
        print(f"tune half, {args.tokens} normalisation: exercises where a verbatim copy of the worked solution is "
              "flagged with it (the floor: all of them) / copies found (generated and hand-written) / hand-written "
              "copies found / independent functions flagged")
        print(f"{'k':>3} {'min tokens':>10} {'threshold':>9} {'exercises':>9} {'copies found':>16} "
              f"{'hand-written':>14} {'independent flagged':>20}")
        rows = []
        for k in ((8, 12, 17, 23) if args.tokens == "dolos" else (10, 15, 20, 25)):
            # the largest minimum size the floor allows at this window: the smallest, over the exercises, of the
            # worked solution's longest graded function
            bound = floor_bound(args.assignments, K_DEFAULT if args.tokens == "dolos" else k, cache)
            for min_tokens in sorted(set(MIN_TOKENS_GRID) | {bound}):
                for threshold in (0.5, 0.6, 0.7, 0.8):
                    t = totals(args.assignments, "tune", k, threshold, min_tokens, args.tokens, cache)
                    cov = covered(args.assignments, K_DEFAULT if args.tokens == "dolos" else k, threshold,
                                  min_tokens, cache)
                    n_cov = sum(bool(v) for v in cov.values())
                    rows.append((k, min_tokens, threshold, n_cov, t))
                    print(f"{k:>3} {min_tokens:>10} {threshold:>9.2f} {n_cov:>4}/{len(cov):<4} "
                          f"{rate(t['found'], t['copies']):>16} {rate(t['hand_found'], t['hand']):>14} "
                          f"{rate(t['false_positives'], t['independent']):>20}")
        eligible = [r for r in rows if r[3] == len(args.assignments)]
        if eligible:
            k, min_tokens, threshold, _, t = min(eligible, key=choice_key)
            print(f"chosen (the floor, then the lowest share of independent functions flagged, the most hand-written "
                  f"copies found, the larger minimum size, the higher threshold, the longer window): k={k}, "
                  f"{min_tokens} tokens, threshold {threshold:.2f}")
        else:
            print("no setting meets the floor")
        return 0
    print(f"copy detection: k={args.k} tokens, threshold {args.threshold:.2f}, at least {args.min_tokens} tokens, "
          f"{args.tokens} normalisation")
    ok = True
    for half in (HALVES if args.half == "both" else (args.half,)):
        t = totals(args.assignments, half, args.k, args.threshold, args.min_tokens, args.tokens, cache,
                   args.verbose)
        print(f"{half}: copied functions long enough to attribute flagged with the right source "
              f"{rate(t['found'], t['copies'])}; hand-written copies (all) {rate(t['hand_found'], t['hand'])}, "
              f"of them written in round 2 {rate(t['hand2_found'], t['hand2'])}, in round 4 "
              f"{rate(t['hand4_found'], t['hand4'])}; independent functions flagged "
              f"{rate(t['false_positives'], t['independent'])}, of them written in round 4 "
              f"{rate(t['false4'], t['independent4'])}; too short to attribute: {t['copies_short']} "
              f"copied, {t['independent_short']} independent")
        for line in t["misses"]:
            print("   missed:", line)
        for line in t["false"]:
            print("   independent:", line)
        if half == "held-out":
            ok = t["hand"] > 0 and t["hand_found"] >= TARGET_FOUND * t["hand"] and \
                t["false_positives"] <= TARGET_FALSE * t["independent"]
            print(f"target (held-out: >= {TARGET_FOUND:.0%} of the hand-written copies found, <= {TARGET_FALSE:.0%} "
                  f"of the independent answers flagged) {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
