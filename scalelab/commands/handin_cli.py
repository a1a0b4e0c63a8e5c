"""The ``scalelab`` command's hand-in commands, run: ``submit``, ``submissions`` and ``feedback``
for students (in a terminal of their server), ``collect`` and ``autograde`` for instructors.
Their parsers are :mod:`scalelab.cli`'s; this module is imported only when one runs.
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _autograde(args: argparse.Namespace) -> int:
    from scalelab.commands.autograde import AutogradeFailed, Sandbox, autograde

    sandbox = Sandbox(
        user=args.as_user,
        memory_bytes=args.memory_mib << 20,
        cell_timeout_s=args.cell_timeout,
        run_timeout_s=args.timeout,
    )
    try:
        results, table = autograde(args.collected, args.instructor, sandbox)
    except AutogradeFailed as exc:
        print(f"scalelab: error: {exc}", file=sys.stderr)
        return 1
    print(f"Graded {len(results)} submission(s): {table}; feedback in {args.collected}/feedback")
    if args.return_feedback:
        from scalelab.commands.handin import return_all
        from scalelab.hub_ext.labs.handin_client import HandInFailed

        try:
            users = return_all(args.collected, args.instructor.stem, hub_url=args.hub)
        except HandInFailed as exc:
            print(f"scalelab: error: returning the feedback stopped: {exc}", file=sys.stderr)
            return 1
        print(f"Returned the feedback to {len(users)} student(s) through the hub.")
    return 0


def _feedback(args: argparse.Namespace) -> int:
    from scalelab.hub_ext.labs.handin_client import HandInFailed, fetch_feedback, place_feedback

    try:
        content = fetch_feedback(args.lab)
    except HandInFailed as exc:
        print(f"scalelab: error: {exc}", file=sys.stderr)
        return 1
    if content is None:
        print(f"No feedback on {args.lab} yet.")
        return 0
    home = Path(os.environ.get("HOME", "~")).expanduser()
    print(f"Your feedback on {args.lab}: {place_feedback(home, args.lab, content)}")
    return 0


def _collect(args: argparse.Namespace) -> int:
    from scalelab.commands.handin import collect

    folder = args.to or Path("collected") / args.lab.removesuffix(".ipynb")
    rows, table = collect(args.lab, args.before, folder, hub_url=args.hub)
    got = [row for row in rows if row["receipt"] is not None]
    late = sum(1 for row in got if row["receipt"]["late"])
    after = sum(1 for row in rows if row["after"])
    print(
        f"Collected {args.lab} from {len(got)} of {len(rows)} student(s) into {folder} "
        f"({late} late; {after} with versions after the cut-off); the table: {table}"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the hand-in command ``args.command`` names; its exit status."""
    import json

    from scalelab.commands.handin import submit
    from scalelab.hub_ext.labs.handin_client import HandInFailed, receipt_line, submissions

    if args.command == "autograde":
        return _autograde(args)
    if args.command == "feedback":
        return _feedback(args)
    try:
        if args.command == "collect":
            return _collect(args)
        if args.command == "submit":
            found = [submit(args.lab, args.notebook)]
        else:
            found = submissions(args.lab)
    except HandInFailed as exc:
        print(f"scalelab: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found[0] if args.command == "submit" else found, indent=1))
    elif args.command == "submit":
        print(f"Handed in: {receipt_line(found[0])}")
        print(f"Kept in the course store as {found[0]['path']}; earlier versions stay.")
    else:
        for receipt in found:
            print(receipt_line(receipt))
        if not found:
            print("Nothing handed in yet" + (f" for {args.lab}." if args.lab else "."))
    return 0
