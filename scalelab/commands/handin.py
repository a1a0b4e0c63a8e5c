"""``scalelab submit`` and ``scalelab submissions``: hand in a lab from a terminal of one's own
server, and list what was handed in; ``scalelab collect``: an instructor's copy of every
student's version (:mod:`scalelab.hub_ext.labs.handin_client`).
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Mapping
from pathlib import Path

from scalelab.hub_ext.labs.handin_client import (
    HandInFailed,
    collection,
    hub_of,
    lab_of,
    return_feedback,
    send,
    version,
)


def notebook_for(lab: str, given: str | None, cwd: Path, home: Path) -> Path:
    """The notebook to hand in: ``given``, else ``<lab>.ipynb`` in ``cwd``, else in ``home``.

    Raises
    ------
    HandInFailed
        No such file (the message names where it looked).
    """
    name = f"{lab_of(lab)}.ipynb"
    candidates = [Path(given)] if given else [cwd / name, home / name]
    for path in candidates:
        if path.is_file():
            return path
    raise HandInFailed(
        f"no notebook {' or '.join(str(p) for p in candidates)}: give its path, "
        f"`scalelab submit {lab} path/to/notebook.ipynb`."
    )


def submit(lab: str, path: str | None, environ: Mapping[str, str] = os.environ) -> dict:
    """Hand in ``lab`` (the notebook at ``path``, see :func:`notebook_for`); the receipt.

    Raises
    ------
    HandInFailed
        Not in a course server, no notebook, or the hub refused (its message says why).
    """
    hub_of(environ)  # outside a course server, say so before looking for the notebook
    home = Path(environ.get("HOME", "~")).expanduser()
    notebook = notebook_for(lab, path, Path.cwd(), home)
    return send(lab, notebook.read_bytes(), environ)


#: The columns of ``collected.csv``, one row per student.
COLUMNS = ("user", "version", "stamp", "submitted_at", "late", "bytes", "sha256", "after_cutoff")


def instructor_hub(environ: Mapping[str, str], hub_url: str | None) -> tuple[str, str]:
    """(API URL, token) for an instructor's call: ``hub_url`` (the hub's address, e.g.
    ``http://127.0.0.1:8000``) or ``JUPYTERHUB_API_URL``; the token in ``SCALELAB_HUB_TOKEN``
    (one made at ``/hub/token`` by a hub admin), else ``JUPYTERHUB_API_TOKEN``.

    Raises
    ------
    HandInFailed
        Neither is set: the message says how to set them.
    """
    api = f"{hub_url.rstrip('/')}/hub/api" if hub_url else environ.get("JUPYTERHUB_API_URL", "")
    token = environ.get("SCALELAB_HUB_TOKEN") or environ.get("JUPYTERHUB_API_TOKEN", "")
    if not api or not token:
        raise HandInFailed(
            "which hub, and as whom? Give --hub http://<hub>:<port> and a hub admin's token in "
            "SCALELAB_HUB_TOKEN (make one at /hub/token while logged in as an admin)."
        )
    return api, token


def collect(
    lab: str,
    before: str | None,
    folder: Path,
    environ: Mapping[str, str] = os.environ,
    hub_url: str | None = None,
) -> tuple[list[dict], Path]:
    """Copy each student's version of ``lab`` (at or before ``before``: ISO 8601 or
    ``"deadline"``; None: the latest) into ``folder/<user>/<stamp>/<lab>.ipynb`` and write
    ``folder/collected.csv`` (:data:`COLUMNS`); a new ``folder`` is made mode 0700 (it holds
    every student's work). A version already there is not written again
    (its name is its stamp: the same bytes); nothing else in ``folder`` is touched.

    Returns
    -------
    (rows, path)
        The hub's rows (``{"user", "receipt", "after"}``) and the CSV's path.

    Raises
    ------
    HandInFailed
        The hub refused or did not answer, or a notebook came back other than its receipt
        says (its SHA-256).
    """
    api, token = instructor_hub(environ, hub_url)
    rows = collection(api, token, lab, before)["students"]
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(COLUMNS)
    for row in rows:
        receipt = row["receipt"]
        if receipt is None:
            writer.writerow([row["user"], "", "", "", "", "", "", row["after"]])
            continue
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # every student's work
        target = folder / row["user"] / receipt["stamp"] / f"{lab_of(lab)}.ipynb"
        if not target.is_file():
            content = version(api, token, row["user"], lab, receipt["stamp"])
            if hashlib.sha256(content).hexdigest() != receipt["sha256"]:
                raise HandInFailed(
                    f"{row['user']}'s version {receipt['version']} came back other than its "
                    "receipt says (SHA-256): nothing written for it; collect again."
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        writer.writerow([row["user"], *(receipt[c] for c in COLUMNS[1:-1]), row["after"]])
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / "collected.csv"
    path.write_text(table.getvalue())
    return rows, path


def return_all(
    folder: Path, lab: str, environ: Mapping[str, str] = os.environ, hub_url: str | None = None
) -> list[str]:
    """Return every ``folder/feedback/<user>/<lab>.ipynb`` (``scalelab autograde``'s) to its
    student through the hub; the users, in name order.

    Raises
    ------
    HandInFailed
        The hub refused (not an admin) or did not answer: the users before it got theirs.
    """
    api, token = instructor_hub(environ, hub_url)
    name = f"{lab_of(lab)}.ipynb"
    returned = []
    for path in sorted((folder / "feedback").glob(f"*/{name}")):
        return_feedback(api, token, path.parent.name, lab, path.read_bytes())
        returned.append(path.parent.name)
    return returned
