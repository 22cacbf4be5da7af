#!/usr/bin/env python
"""Calibrate the copy detection (scripts/tfmgrader/similarity.py) on a generated class; print its error rates.

    python scripts/similarity_calibration.py [ASSIGNMENT ...] [--k K] [--threshold T] [--min-tokens N]
                                             [--tokens ast|copydetect] [--grid] [--verbose]

For each assignment (default: 03_self_attention, 04_multi_head, 07_efficiency) it builds, at the level of
function sources (no notebooks, no nbgrader), a class of at least 30 submissions:

* independent answers: every correct style of ``tests/fixtures/styles/``, more correct styles and wrong
  answers of ``tests/fixtures/similarity_corpus/`` (none may be flagged);
* disguised copies of tfmlib (its function of the same name, its input checks left out; the solution where
  tfmlib has no such function) and of the solutions, each with every disguise of
  ``tests/fixtures/disguise.py`` (rename, reorder, comment, wrap, all four) and two seeds (each graded
  function must be flagged with the source it was copied from);
* copies between two students: a learner copies an independent answer with every disguise at once (both the
  copy and the original must be flagged, each with the other as source).

A copy counts as found when the closest source (or one as close) has the same normalised code as the source
it was copied from (tfmlib's code shown on the site is tfmlib's code).  Functions with fewer than
``--min-tokens`` tokens of their own are not attributed and counted apart.  Prints the false negative rate
(copies not flagged with the right source) and the false positive rate (independent answers flagged), per
assignment and in total; ``--grid`` prints them for several windows and thresholds.
"""
from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tfmgrader import similarity as sim  # noqa: E402
from course_fixtures import fixture  # noqa: E402

# The tests' fixtures (tests/fixtures/), imported by path (scripts/course_fixtures.py).
_answers, _disguise = fixture("answers"), fixture("disguise")
STYLES, EXTRA_CORRECT, WRONG = _answers.STYLES, _answers.EXTRA_CORRECT, _answers.WRONG
KINDS, disguise, without_library_checks = _disguise.KINDS, _disguise.disguise, _disguise.without_library_checks

ASSIGNMENTS = ["03_self_attention", "04_multi_head", "07_efficiency"]
SEEDS = (0, 1)


@dataclass
class Expected:
    role: str            # "independent", "copy" or "original"
    source: dict         # function -> label of the unit it was copied from (copies and originals)


def tfmlib_function(name: str) -> str | None:
    """tfmlib's own source of the function ``name`` (without its helpers), or None."""
    for path in sorted(sim.tfmlib_folder().glob("*.py")):
        functions, text = sim.module_functions(path)
        node = functions.get(name)
        if isinstance(node, ast.FunctionDef):
            return ast.get_source_segment(text, node)
    return None


def independent_answers(assignment: str, graded: list[str]) -> dict[str, dict[str, str]]:
    """``{student: {function: source}}``: the styles, the extra correct styles and the wrong answers."""
    out = {}
    for style, cells in STYLES.get(assignment, {}).items():
        defs = sim.cell_functions(list(cells.values()))
        out[f"style-{style}"] = {n: sim.unit_source(sim.unit(n, defs, set(graded))) for n in graded if n in defs}
    for style, functions in EXTRA_CORRECT.get(assignment, {}).items():
        out[f"correct-{style}"] = dict(functions)
    for name, functions in WRONG.get(assignment, {}).items():
        out[f"wrong-{name}"] = dict(functions)
    return out


def build_class(assignment: str, graded: list[str], refs: list[sim.Unit]):
    """``({student: {function: source}}, {student: Expected})`` for one assignment."""
    solution = {u.function: u for u in refs if u.kind == "solution"}
    tfmlib = {u.function: u for u in refs if u.kind == "tfmlib"}
    subs, expected = {}, {}
    independent = independent_answers(assignment, graded)
    # two originals (the last extra correct style and the last wrong answer) are copied by classmates
    originals = [s for s in independent if s.startswith("correct-")][-1:] + \
                [s for s in independent if s.startswith("wrong-")][-1:]
    for student, functions in independent.items():
        subs[student] = functions
        expected[student] = Expected("independent", {})
    for original in originals:
        copier = f"copy-of-{original}"
        subs[copier] = {n: disguise(src, n, "all", seed=7) for n, src in subs[original].items()}
        expected[copier] = Expected("copy", {n: original for n in subs[original]})
        expected[original] = Expected("original", {n: copier for n in subs[original]})
    for seed in SEEDS:
        for how in KINDS:
            student = f"copy-tfmlib-{how}-{seed}"
            subs[student], expected[student] = {}, Expected("copy", {})
            for name in graded:
                text = tfmlib_function(name)
                label = tfmlib[name].label if text is not None and name in tfmlib else solution[name].label
                text = without_library_checks(text) if text is not None and name in tfmlib else solution[name].source
                subs[student][name] = disguise(text, name, how, seed)
                expected[student].source[name] = label
            student = f"copy-solution-{how}-{seed}"
            subs[student] = {n: disguise(solution[n].source, n, how, seed) for n in graded}
            expected[student] = Expected("copy", {n: solution[n].label for n in graded})
    return subs, expected


def records(assignment: str, k: int, mode: str, cache: dict, min_tokens: int) -> list[dict]:
    """For each graded function of the class: its role, size, and for the closest reference and the closest
    classmate their similarity and whether it is the right source (computed once per window ``k``)."""
    if assignment not in cache:
        notebooks, graded, refs = sim.references(ROOT, assignment)
        subs, expected = build_class(assignment, graded, refs)
        cache[assignment] = (notebooks, graded, refs, subs, expected)
    notebooks, graded, refs, subs, expected = cache[assignment]
    key = (assignment, k, mode, min_tokens)
    if key in cache:
        return cache[key]
    units = {s: sim.function_units(s, "student", list(functions.values()), graded) for s, functions in subs.items()}
    fp = sim.Fingerprints(sim.release_cells(notebooks), k, mode)
    for u in refs:
        fp.add(u)
    for functions in units.values():
        for u in functions.values():
            fp.add(u)
    by_label = {u.label: u for u in refs}
    out = []
    for student, functions in sorted(units.items()):
        exp = expected[student]
        for name, u in functions.items():
            want = exp.source.get(name)
            want_code = None if want is None else (by_label[want].normalised if want in by_label
                                                   else units[want][name].normalised)
            best = {"reference": (0.0, None), "student": (0.0, None)}
            for c in refs + [o[name] for s, o in units.items() if s != student and name in o]:
                if (c.function and c.function != name) or c.size < min_tokens:
                    continue
                share, _ = fp.compare(u, c)
                group = "student" if c.kind == "student" else "reference"
                if share > best[group][0] or (share == best[group][0] and best[group][1] is not None
                                              and want_code is not None and c.normalised == want_code):
                    best[group] = (share, c)
            right = {g: (c is not None and want_code is not None and (c.label == want or c.normalised == want_code))
                     for g, (_, c) in best.items()}
            out.append({"student": student, "function": name, "role": exp.role, "size": u.size, "want": want,
                        "ref": best["reference"][0], "ref_label": best["reference"][1].label if best["reference"][1] else "-",
                        "ref_right": right["reference"], "mate": best["student"][0],
                        "mate_label": best["student"][1].label if best["student"][1] else "-",
                        "mate_right": right["student"]})
    cache[key] = out
    return out


def evaluate(assignment: str, k: int, threshold: float, min_tokens: int, mode: str, verbose: bool = False,
             cache: dict | None = None) -> dict:
    """Counts for one assignment, with ``similarity.closest``'s rule: the closest reference when it reaches
    the threshold, else the closest of all."""
    cache = cache if cache is not None else {}
    counts = {"submissions": len(cache.get(assignment, [None] * 5)[3] or []), "copies": 0, "found": 0,
              "copies_short": 0, "independent": 0, "false_positives": 0, "independent_short": 0,
              "misses": [], "false": []}
    for r in records(assignment, k, mode, cache, min_tokens):
        counts["submissions"] = len(cache[assignment][3])
        short = r["size"] < min_tokens
        if r["ref"] >= threshold:
            similarity, label, right = r["ref"], r["ref_label"], r["ref_right"]
        elif r["mate"] > r["ref"]:
            similarity, label, right = r["mate"], r["mate_label"], r["mate_right"]
        else:
            similarity, label, right = r["ref"], r["ref_label"], r["ref_right"]
        flagged = similarity >= threshold
        where = f"{r['student']} {r['function']} ({r['size']} tokens): {similarity:.2f} ~ {label}"
        if r["role"] in ("copy", "original"):
            if short:
                counts["copies_short"] += 1
                continue
            counts["copies"] += 1
            counts["found"] += flagged and right
            if not (flagged and right):
                counts["misses"].append(f"{where} (copied from {r['want']})")
        else:
            if short:
                counts["independent_short"] += 1
                continue
            counts["independent"] += 1
            counts["false_positives"] += flagged
            if flagged or verbose:
                counts["false"].append(where + (" FLAGGED" if flagged else ""))
    return counts


def rates(c: dict) -> tuple[float, float]:
    fn = 1 - c["found"] / c["copies"] if c["copies"] else 0.0
    fp = c["false_positives"] / c["independent"] if c["independent"] else 0.0
    return fn, fp


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", default=ASSIGNMENTS)
    parser.add_argument("--k", type=int, default=sim.K)
    parser.add_argument("--threshold", type=float, default=sim.THRESHOLD)
    parser.add_argument("--min-tokens", type=int, default=sim.MIN_TOKENS)
    parser.add_argument("--tokens", choices=["ast", "copydetect"], default="ast",
                        help="normalisation: ours (default) or copydetect's own Pygments filter")
    parser.add_argument("--grid", action="store_true", help="error rates for several windows and thresholds")
    parser.add_argument("--verbose", action="store_true", help="every independent answer's closest source")
    args = parser.parse_args(argv)
    cache: dict = {}
    if args.grid:
        print(f"{'k':>3} {'min tokens':>10} {'threshold':>9} {'FN rate':>8} {'FP':>7} {'copies':>7} "
              f"{'indep.':>7}   (all assignments, {args.tokens} tokens)")
        for k in (10, 15, 20):
            for min_tokens in (40, 60, 80):
                for threshold in (0.5, 0.6, 0.7):
                    total = {"copies": 0, "found": 0, "independent": 0, "false_positives": 0}
                    for a in args.assignments:
                        c = evaluate(a, k, threshold, min_tokens, args.tokens, cache=cache)
                        for key in total:
                            total[key] += c[key]
                    fn, fp = rates(total)
                    print(f"{k:>3} {min_tokens:>10} {threshold:>9.2f} {fn:>8.1%} {total['false_positives']:>3}/"
                          f"{total['independent']:<3} {total['copies']:>7} {total['independent']:>7}")
        return 0
    total = {"copies": 0, "found": 0, "independent": 0, "false_positives": 0}
    print(f"copy detection: k={args.k} tokens, threshold {args.threshold:.2f}, at least {args.min_tokens} tokens, "
          f"{args.tokens} normalisation")
    ok = True
    for a in args.assignments:
        c = evaluate(a, args.k, args.threshold, args.min_tokens, args.tokens, args.verbose, cache)
        fn, fp = rates(c)
        for key in total:
            total[key] += c[key]
        print(f"{a}: {c['submissions']} submissions; copied functions flagged with the right source "
              f"{c['found']}/{c['copies']} (false negative rate {fn:.1%}); independent functions flagged "
              f"{c['false_positives']}/{c['independent']} (false positive rate {fp:.1%}); too short to attribute: "
              f"{c['copies_short']} copied, {c['independent_short']} independent")
        for line in c["misses"]:
            print("   missed:", line)
        for line in c["false"]:
            print("   independent:", line)
        ok &= fn <= 0.05 and c["false_positives"] == 0
    fn, fp = rates(total)
    print(f"all: copies found {total['found']}/{total['copies']} (false negative rate {fn:.1%}), independent "
          f"flagged {total['false_positives']}/{total['independent']} (false positive rate {fp:.1%})")
    print("target met (>= 95% of copies found, no independent answer flagged)" if ok else "TARGET NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
