"""Hand-in: a student's lab, kept in the course store as an immutable, timestamped version.

Pure logic (no I/O): which labs may be handed in, the checks a handed-in notebook passes, where
a version lies in the store, its receipt, and the deadline's late flag. The hub writes the
versions (:mod:`scalelab.hub_ext.hub.submissions`); students only send them, so no student can
change or remove one, nor read another's.

Layout in the course store (the hub's folder ``submissions/``, mode 0700 where the store has
modes)::

    submissions/<lab>/<user>/<stamp>/<lab>.ipynb   the notebook, byte for byte as sent
    submissions/<lab>/<user>/<stamp>/receipt.json  written last: a version without it is none

``<stamp>`` is the hub's UTC time of the hand-in, ``20261207T221500.123456Z``: versions sort by
it, and a re-submission is a new version beside the earlier ones.
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import nbformat
from traitlets import Dict, Float, Int, TraitError, Unicode, validate

from scalelab.common.strictconfig import StrictConfigurable

#: The store's folder of the handed-in versions (written by the hub only).
SUBMISSIONS = "submissions"
#: The store's folder of the feedback returned to students (written by the hub only):
#: ``feedback/<lab>/<user>/<lab>.ipynb``, the latest grading's.
FEEDBACK = "feedback"
#: The receipt's file name in each version's folder.
RECEIPT = "receipt.json"
#: How a version's folder is named: the hub's UTC time of the hand-in, to the microsecond.
STAMP_FORMAT = "%Y%m%dT%H%M%S.%fZ"
_STAMP = re.compile(r"\d{8}T\d{6}\.\d{6}Z")
#: A lab's name: the stem of its notebook's file name (``lab1_millionsong_regression``).
_LAB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


class HandInError(ValueError):
    """A hand-in is refused; the message names the problem and the fix (shown to the student)."""


class HandInLimitError(HandInError):
    """The student has handed in a lab as many times as the course allows."""


class HandIn(StrictConfigurable):
    """Hand-in of labs to the course store (``c.HandIn``, in ``jupyterhub_config.py``)."""

    deadlines = Dict(
        value_trait=Unicode(),
        config=True,
        help="""Deadline of each lab, by the lab's name (its notebook's file name without
        `.ipynb`), as an ISO 8601 time with its UTC offset: `{"lab1_millionsong_regression":
        "2027-01-15T23:59:00+01:00"}`. A version handed in after it is kept and marked late.
        A lab not named has no deadline. Default: none.""",
    )

    max_notebook_mib = Float(
        32.0,
        config=True,
        help="""Largest notebook a student may hand in, in MiB (outputs included: a notebook
        over it is refused with its size and the fix, clear the outputs). Default 32.""",
    )

    max_versions = Int(
        100,
        config=True,
        help="""Versions of one lab a student may hand in (each is kept): one more is refused
        with the count and the fix, ask the instructor. It bounds what a student's loop can
        put in the course store (at most max_versions x max_notebook_mib per lab). 0: no
        bound. Default 100.""",
    )

    @validate("max_versions")
    def _valid_max_versions(self, proposal: dict) -> int:
        if proposal["value"] < 0:
            raise TraitError(f"c.HandIn.max_versions = {proposal['value']}: use 0 or more")
        return proposal["value"]

    @validate("deadlines")
    def _valid_deadlines(self, proposal: dict) -> dict:
        for lab, text in proposal["value"].items():
            check_lab_name(lab)
            parse_deadline(text, lab)
        return proposal["value"]


@dataclass(frozen=True)
class Receipt:
    """What the student gets back for one handed-in version (and what ``receipt.json`` holds).

    ``submitted_at`` and ``deadline`` are ISO 8601 times (UTC; ``deadline`` None: the lab has
    none); ``late`` is True when ``submitted_at`` is after ``deadline``; ``bytes`` and
    ``sha256`` are the notebook's as sent; ``cells`` its cell count; ``path`` the notebook's path
    in the store (from the store's root).
    """

    lab: str
    user: str
    version: int
    stamp: str
    submitted_at: str
    deadline: str | None
    late: bool
    bytes: int
    sha256: str
    cells: int
    path: str

    def as_dict(self) -> dict:
        """The receipt as JSON-ready data."""
        return asdict(self)


def check_lab_name(lab: str) -> str:
    """``lab`` without a trailing ``.ipynb``, if it can name a lab (pure).

    Raises
    ------
    HandInError
        Empty, too long (over 100 characters), or with characters other than letters, digits,
        ``_``, ``.`` and ``-`` (a path, ``..``).
    """
    name = lab.removesuffix(".ipynb")
    if not _LAB.fullmatch(name) or ".." in name:
        raise HandInError(
            f"{lab!r} does not name a lab: use the lab notebook's file name, such as "
            "'lab1_millionsong_regression' (letters, digits, '_', '.', '-')."
        )
    return name


def parse_deadline(text: str, lab: str = "") -> datetime:
    """``text`` (ISO 8601 with a UTC offset) as an aware time (pure).

    Raises
    ------
    HandInError
        Not ISO 8601, or without a UTC offset (a deadline must not depend on the hub's zone).
    """
    where = f"c.HandIn.deadlines[{lab!r}]" if lab else "a deadline"
    try:
        when = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise HandInError(
            f"{where} = {text!r} is not an ISO 8601 time: write it as '2027-01-15T23:59:00+01:00'"
        ) from None
    if when.utcoffset() is None:
        raise HandInError(
            f"{where} = {text!r} has no UTC offset: add it ('+01:00', or 'Z' for UTC), so the "
            "deadline does not depend on the hub's time zone"
        )
    return when


def check_notebook(content: bytes, max_bytes: int) -> int:
    """The cell count of ``content``, a notebook a student hands in (pure).

    Raises
    ------
    HandInError
        Over ``max_bytes``, empty, not JSON, or not a valid notebook (nbformat's schema): the
        message says which and what to do.
    """
    if len(content) > max_bytes:
        raise HandInError(
            f"the notebook is {len(content) / 2**20:.1f} MiB, over the course's "
            f"{max_bytes / 2**20:.3g} MiB for a hand-in: clear its outputs "
            "(Edit > Clear Outputs of All Cells), save it, and hand it in again."
        )
    if not content.strip():
        raise HandInError("the notebook is empty: save it in JupyterLab and hand it in again.")
    try:
        data = json.loads(content.decode("utf-8"))
    except UnicodeDecodeError:
        raise HandInError("the file is not UTF-8 text, so not a notebook (.ipynb).") from None
    except json.JSONDecodeError as exc:
        raise HandInError(
            f"the file is not a notebook: its JSON breaks at line {exc.lineno}, column "
            f"{exc.colno}. Open it in JupyterLab, save it, and hand it in again."
        ) from None
    try:
        if not isinstance(data, dict) or "nbformat" not in data:
            raise ValueError("no 'nbformat' version field")
        notebook = nbformat.from_dict(data)
        with warnings.catch_warnings():  # duplicate or missing cell ids: kept as sent
            warnings.simplefilter("ignore")
            nbformat.validate(notebook)
    except (nbformat.ValidationError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise HandInError(
            f"the file is not a valid notebook ({first}). Open it in JupyterLab, save it, and "
            "hand it in again."
        ) from None
    return len(notebook.get("cells", []))


def check_room(lab: str, earlier: Iterable[str], max_versions: int) -> None:
    """Refuse one more version of ``lab`` after the versions ``earlier`` (their stamps) when
    ``max_versions`` (> 0) are there already (pure).

    Raises
    ------
    HandInLimitError
        The count is reached: the message gives it and the fix.
    """
    count = sum(1 for name in earlier if is_stamp(name))
    if max_versions and count >= max_versions:
        raise HandInLimitError(
            f"you have handed in {lab} {count} times, the course's limit (every version is "
            "kept): ask your instructor if you need to hand in again."
        )


def stamp(when: datetime) -> str:
    """``when`` (aware) as a version's folder name, in UTC (:data:`STAMP_FORMAT`)."""
    return when.astimezone(UTC).strftime(STAMP_FORMAT)


def is_stamp(name: str) -> bool:
    """Whether ``name`` is a version folder's name."""
    return bool(_STAMP.fullmatch(name))


def user_folder(lab: str, user: str) -> str:
    """The folder of ``user``'s versions of ``lab``, from the store's root."""
    return f"{SUBMISSIONS}/{lab}/{user}"


def make_receipt(
    lab: str,
    user: str,
    content: bytes,
    cells: int,
    when: datetime,
    earlier: Iterable[str],
    deadlines: Mapping[str, str],
) -> Receipt:
    """The receipt of ``user``'s hand-in of ``lab`` at ``when`` (aware), after the versions
    whose stamps are ``earlier`` (pure). The version number counts them (1 for the first)."""
    version_stamp = stamp(when)
    deadline = deadlines.get(lab)
    due = parse_deadline(deadline, lab) if deadline else None
    return Receipt(
        lab=lab,
        user=user,
        version=len([s for s in earlier if is_stamp(s) and s < version_stamp]) + 1,
        stamp=version_stamp,
        submitted_at=when.astimezone(UTC).isoformat(),
        deadline=due.astimezone(UTC).isoformat() if due else None,
        late=due is not None and when > due,
        bytes=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        cells=cells,
        path=f"{user_folder(lab, user)}/{version_stamp}/{lab}.ipynb",
    )


def chosen_version(
    receipts: Sequence[Mapping], before: datetime | None
) -> tuple[Mapping | None, int]:
    """The version to collect from one student's ``receipts`` of one lab (pure): the latest
    handed in at or before ``before`` (aware; None: the latest of all), and how many versions
    came after ``before`` (0 without it).

    Returns
    -------
    (receipt or None, int)
        None when every version came after ``before`` (or there is none).
    """
    ordered = sorted(receipts, key=lambda r: r["stamp"])
    if before is None:
        return (ordered[-1] if ordered else None), 0
    cut = stamp(before)
    kept = [r for r in ordered if r["stamp"] <= cut]
    return (kept[-1] if kept else None), len(ordered) - len(kept)
