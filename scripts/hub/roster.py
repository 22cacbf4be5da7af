#!/usr/bin/env python
"""A class from one roster CSV: the students in the gradebook (names, e-mail) and, on the class's hub, their accounts.

    python scripts/hub/roster.py roster.csv --course /srv/nbgrader/course                # the gradebook only
    sudo python scripts/hub/roster.py roster.csv --course /srv/nbgrader/course \\
         --accounts --group students [--passwords /root/class-passwords.csv]            # and the Unix accounts

The CSV has a header row with ``id`` (the login, which is also nbgrader's student id) and any of ``first_name``,
``last_name``, ``email`` and ``lms_user_id`` (nbgrader's student fields); other columns are ignored.  Every
row is checked first (an id must be a valid login name: lower-case letters, digits, ``_`` and ``-``, at most 32
characters, starting with a letter or ``_``; no id twice) and nothing is changed if one is wrong.

* **Gradebook** (always): each student is created or updated (``Gradebook.update_or_create_student``, as
  ``nbgrader db student import`` does), so Formgrader and ``nbgrader export`` show real names.  Run as root, an
  SQLite gradebook that did not exist is given to the owner of the course root (the instructor's server writes it).
* **Accounts** (``--accounts``, as root): a Unix account with a private home for each student who has none, in
  ``--group`` (the hub's ``TFMHUB_GROUP``).  With ``--passwords FILE`` each new account gets a random password,
  written to ``FILE`` (mode 0600, ``id,password``) for the PAM login; without it the accounts have no password,
  for a hub whose authenticator is single sign-on (book/appendix/instructors.md, "Single sign-on").
  Existing accounts are left as they are (their password too).

Run it again with a longer roster to add late enrolments: nothing is created twice.
"""
from __future__ import annotations

import argparse
import csv
import os
import pwd
import re
import secrets
import subprocess
import sys
from pathlib import Path

FIELDS = ("first_name", "last_name", "email", "lms_user_id")
LOGIN = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def read_roster(path: Path) -> list[dict[str, str]]:
    """The roster's rows (``id`` and the student fields present); SystemExit naming every bad row."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if "id" not in (reader.fieldnames or []):
            raise SystemExit(f"{path}: the header row needs an 'id' column (found: {reader.fieldnames})")
        rows = [{k: (v or "").strip() for k, v in r.items() if k in ("id", *FIELDS)} for r in reader]
    problems, seen = [], set()
    for line, row in enumerate(rows, start=2):
        if not LOGIN.fullmatch(row["id"]):
            problems.append(f"line {line}: {row['id']!r} is not a valid login name")
        elif row["id"] in seen:
            problems.append(f"line {line}: {row['id']!r} is listed twice")
        seen.add(row["id"])
    if problems:
        raise SystemExit(f"{path}: nothing changed, fix these rows first:\n  " + "\n  ".join(problems))
    return rows


def import_gradebook(rows: list[dict[str, str]], db_url: str) -> int:
    """Create or update each student in the gradebook; returns how many were new."""
    from nbgrader.api import Gradebook, MissingEntry

    new = 0
    with Gradebook(db_url) as gb:
        for row in rows:
            try:
                gb.find_student(row["id"])
            except MissingEntry:
                new += 1
            gb.update_or_create_student(row["id"], **{k: row[k] or None for k in FIELDS if k in row})
    return new


def create_accounts(rows: list[dict[str, str]], group: str | None, passwords: Path | None) -> list[str]:
    """A Unix account for each student who has none (root only); returns the ids created."""
    if os.geteuid() != 0:
        raise SystemExit("--accounts creates Unix accounts: run it as root")
    if group:
        subprocess.run(["groupadd", "-f", group], check=True)
    created, secret = [], []
    for row in rows:
        try:
            pwd.getpwnam(row["id"])
            continue
        except KeyError:
            pass
        comment = " ".join(p for p in (row.get("first_name"), row.get("last_name")) if p)
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", *(["--groups", group] if group else []),
                        *(["--comment", comment] if comment else []), row["id"]], check=True)
        home = Path(pwd.getpwnam(row["id"]).pw_dir)
        os.chmod(home, 0o700)
        created.append(row["id"])
        if passwords is not None:
            secret.append((row["id"], secrets.token_urlsafe(12)))
    if secret:
        subprocess.run(["chpasswd"], input="".join(f"{u}:{p}\n" for u, p in secret), text=True, check=True)
        fd = os.open(passwords, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as f:
            csv.writer(f).writerows(secret)
    return created


def gradebook_url(course: Path) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "grader"))      # tfmgrader
    from tfmgrader.course import load_config

    return load_config(course).CourseDirectory.db_url


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("roster", type=Path, help="the roster CSV (header: id, first_name, last_name, email, ...)")
    parser.add_argument("--course", type=Path, default=Path("."), help="the course root (default: .)")
    parser.add_argument("--accounts", action="store_true", help="also create a Unix account per new student (root)")
    parser.add_argument("--group", help="with --accounts: the students' group (the hub's TFMHUB_GROUP)")
    parser.add_argument("--passwords", type=Path,
                        help="with --accounts: give new accounts random passwords, appended to this file (0600)")
    args = parser.parse_args(argv)
    rows = read_roster(args.roster)
    course = args.course.resolve()
    created = create_accounts(rows, args.group, args.passwords) if args.accounts else []
    db_url = gradebook_url(course)
    db_file = Path(db_url.split("sqlite:///", 1)[1].split("?")[0]) if db_url.startswith("sqlite:///") else None
    existed = db_file is not None and db_file.exists()
    new = import_gradebook(rows, db_url)
    if db_file is not None and not existed and os.geteuid() == 0:     # the instructor's server writes it
        owner = course.stat()
        os.chown(db_file, owner.st_uid, owner.st_gid)
    print(f"{len(rows)} students in the roster: {new} new in the gradebook, {len(rows) - new} updated"
          + (f"; {len(created)} new accounts" if args.accounts else "")
          + (f" (passwords in {args.passwords})" if args.accounts and args.passwords and created else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
