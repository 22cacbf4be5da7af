"""What ``scripts/grade.py`` writes about the whole class once every submission of a batch is graded.

* copy detection (``similarity.py``): ``similar_to`` and ``similarity`` columns in ``grades.csv``,
  ``similarity.csv`` and ``similarity.html``;
* the mistake report (``mistakes.py``): ``mistakes.csv`` and ``mistakes.png``.

Both are for the instructor to read; neither changes a score.  A failure here is reported and leaves the
grades as they are: it never stops the batch.
"""
from __future__ import annotations

import traceback
from pathlib import Path

from tfmgrader import mistakes
from tfmgrader import similarity
from tfmgrader.files import write_csv


def columns(analysis, students: list[str], scored=(), failed: str = "") -> dict[str, dict[str, str]]:
    """grades.csv's two similarity columns of each student: the closest source of their most similar graded
    function ("(flagged)" when copy detection flags it), empty for a submission with nothing to compare.  A
    student of ``scored`` whose graded functions copy detection read none of is flagged ``UNREAD`` there too, and,
    when the analysis failed (``analysis`` None), with ``failed``: grades.csv shows every flag the gradebook has."""
    empty = {"similar_to": "", "similarity": ""}
    if analysis is None:
        flag = {"similar_to": f"{failed} (flagged)", "similarity": ""} if failed else empty
        return {s: dict(flag) if s in scored else dict(empty) for s in students}
    read = {student for student, _ in analysis.matches}
    return {s: {"similar_to": f"{UNREAD} (flagged)", "similarity": ""} if s in scored and s not in read
            else similarity.summary(analysis, s) for s in students}


#: What a submission that scored with none of its graded functions readable is flagged with: copy detection reads
#: the code the kernel runs, so an answer it cannot find was hidden from it (red-team round 23).
UNREAD = "copy detection found none of the graded functions, yet the notebook scored"


def copy_suspicions(analysis, students: list[str], scored=()) -> dict[str, dict[str, str]]:
    """``{student: {"similar_to": ..., "similarity": ...}}``: each graded function copy detection flagged, with
    its closest source, and the highest similarity ('' for a student with none flagged); a student of ``scored``
    (points above zero) whose graded functions it found none of: ``UNREAD``."""
    out = {s: {"similar_to": "", "similarity": ""} for s in students}
    read = {student for student, _ in analysis.matches}
    for s in scored:
        if s in out and s not in read:
            out[s] = {"similar_to": UNREAD, "similarity": ""}
    for (student, function), m in sorted(analysis.matches.items()):
        if m.flagged and student in out:
            entry = out[student]
            label = f"{function} ~ {m.source.label if m.source else '?'} ({m.similarity:.2f})"
            entry["similar_to"] = f"{entry['similar_to']}; {label}" if entry["similar_to"] else label
            entry["similarity"] = f"{max(float(entry['similarity'] or 0), m.similarity):.2f}"
    return out


def scored(rows: list[dict]) -> list[str]:
    """The students of grades.csv's ``rows`` with points above zero."""
    out = []
    for r in rows:
        try:
            if float(r.get("score") or 0) > 0:
                out.append(r["student_id"])
        except (ValueError, TypeError, KeyError):
            continue
    return out


def save_suspicions(db_url: str, assignment: str, suspicions: dict[str, dict[str, str]]) -> None:
    """The copy suspicions in the gradebook's verdicts (``verdicts.py``): a flagged copy flags the submission."""
    from tfmgrader import verdicts

    verdicts.save_many(db_url, assignment, suspicions)


def write_class_reports(course: Path, assignment: str, out: Path, students: list[str], submitted: Path,
                        source_dir: str = "solutions", autograded_dir: str = "autograded",
                        db_url: str | None = None, rows: list[dict] = ()) -> tuple[list[str], dict[str, dict]]:
    """Write the class reports into ``out``, beside grades.csv; returns (the paths written, grades.csv's similarity
    columns of each student).  ``rows``: the class's grades.csv rows (who scored)."""
    written, analysis, failed = [], None, ""
    try:
        analysis = similarity.analyse_class(course, assignment, students, submitted, source_dir)
        write_csv(out / "similarity.csv", similarity.rows(analysis))
        flagged = similarity.write_html(out / "similarity.html", assignment, analysis)
        written += [str(out / "similarity.csv"), str(out / "similarity.html")]
        print(f"copy detection: {flagged} graded function(s) flagged for review in {out / 'similarity.html'} "
              "(no score changed)")
    except Exception as err:  # noqa: BLE001 - the grades stand; every scored submission is flagged for review
        print(f"copy detection failed, grades.csv has no similarity ({type(err).__name__}: {err})")
        traceback.print_exc()
        failed = f"copy detection failed ({type(err).__name__}): review by hand"
        if db_url:
            try:
                save_suspicions(db_url, assignment, {s: {"similar_to": failed, "similarity": ""} for s in scored(rows)})
            except Exception as err2:  # noqa: BLE001
                print(f"could not flag the class in the gradebook ({type(err2).__name__}: {err2})")
    if analysis is not None and db_url:
        try:
            save_suspicions(db_url, assignment, copy_suspicions(analysis, students, scored(rows)))
        except Exception as err:  # noqa: BLE001
            print(f"could not save the copy suspicions in the gradebook ({type(err).__name__}: {err})")
            traceback.print_exc()
    try:
        found = columns(analysis, students, scored(rows), failed)
    except Exception as err:  # noqa: BLE001
        print(f"could not summarise copy detection for grades.csv ({type(err).__name__}: {err})")
        found = columns(None, students, scored(rows), f"copy detection's summary failed ({type(err).__name__}): "
                                                      "review by hand")
    try:
        notebooks = sorted((course / source_dir / assignment).glob("*.ipynb"))
        autograded = {s: sorted((course / autograded_dir / s / assignment).glob("*.ipynb")) for s in students}
        autograded = {s: nbs for s, nbs in autograded.items() if nbs}
        flags: dict[str, set[str]] = {}
        if analysis is not None:
            for (student, function), m in analysis.matches.items():
                if m.flagged:
                    flags.setdefault(function, set()).add(student)
        rows = mistakes.aggregate(assignment, notebooks, autograded, flags)
        write_csv(out / "mistakes.csv", rows, mistakes.FIELDS)
        mistakes.plot(out / "mistakes.png", assignment, rows)
        written += [str(out / "mistakes.csv"), str(out / "mistakes.png")]
        print(f"the class's mistakes: {out / 'mistakes.csv'} and {out / 'mistakes.png'}")
    except Exception as err:  # noqa: BLE001
        print(f"the mistake report failed ({type(err).__name__}: {err})")
        traceback.print_exc()
    return written, found
