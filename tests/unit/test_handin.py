"""Hand-in's pure parts (issue 33, Must 2): lab names, deadlines and the late flag, the checks a
handed-in notebook passes, receipts and version numbers, and the command's own text. The hub
and the store run for real in ``tests/integration/hub/test_handin.py``."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from traitlets import TraitError
from traitlets.config import Config

from scalelab.commands.handin import notebook_for, submit
from scalelab.hub_ext.labs.handin import (
    HandIn,
    HandInError,
    HandInLimitError,
    check_lab_name,
    check_notebook,
    check_room,
    chosen_version,
    is_stamp,
    make_receipt,
    parse_deadline,
    stamp,
)
from scalelab.hub_ext.labs.handin_client import HandInFailed, receipt_line

NOTEBOOK = nbformat.writes(
    nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {i}") for i in range(3)])
).encode()
DUE = "2027-01-15T23:59:00+01:00"  # 22:59 UTC


@pytest.mark.parametrize(
    "given, name",
    [("lab1_millionsong_regression", "lab1_millionsong_regression"), ("lab2.ipynb", "lab2"),
     ("project-2.v1", "project-2.v1")],
)  # fmt: skip
def test_a_lab_is_named_by_its_notebook_s_stem(given: str, name: str):
    assert check_lab_name(given) == name


@pytest.mark.parametrize("bad", ["", "../home", "a/b", ".hidden", "a..b", "x" * 101, "lab 1"])
def test_a_name_that_could_be_a_path_is_no_lab(bad: str):
    with pytest.raises(HandInError, match="does not name a lab"):
        check_lab_name(bad)


def test_a_deadline_needs_its_utc_offset():
    assert parse_deadline(DUE) == datetime(2027, 1, 15, 22, 59, tzinfo=UTC)
    assert parse_deadline("2027-01-15T22:59:00Z") == parse_deadline(DUE)
    with pytest.raises(HandInError, match="has no UTC offset"):
        parse_deadline("2027-01-15T23:59:00", "lab1")
    with pytest.raises(HandInError, match=r"c.HandIn.deadlines\['lab1'\] = 'soon' is not an ISO"):
        parse_deadline("soon", "lab1")


def test_the_settings_refuse_a_bad_deadline_or_lab_and_a_misspelt_name():
    ok = HandIn(config=Config({"HandIn": {"deadlines": {"lab1": DUE}}}))
    assert ok.deadlines == {"lab1": DUE} and ok.max_notebook_mib == 32.0
    with pytest.raises(HandInError, match="no UTC offset"):
        HandIn(config=Config({"HandIn": {"deadlines": {"lab1": "2027-01-15"}}}))
    with pytest.raises(HandInError, match="does not name a lab"):
        HandIn(config=Config({"HandIn": {"deadlines": {"../x": DUE}}}))
    with pytest.raises(TraitError, match="unknown setting"):
        HandIn(config=Config({"HandIn": {"max_notebook_mb": 1}}))


def test_a_notebook_passes_with_its_cell_count():
    assert check_notebook(NOTEBOOK, 2**20) == 3


@pytest.mark.parametrize(
    "content, said",
    [
        (NOTEBOOK + b" " * 2**20, "the notebook is 1.0 MiB, over the course's 0.5 MiB"),
        (b"  \n", "the notebook is empty"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"cells": [\n', "its JSON breaks at line 2, column 1"),
        (b"[1, 2]", "not a valid notebook (no 'nbformat' version field)"),
        (b'{"nbformat": 4, "nbformat_minor": 5, "cells": "none"}', "not a valid notebook"),
    ],
)
def test_a_notebook_that_is_none_is_refused_by_name(content: bytes, said: str):
    with pytest.raises(HandInError) as caught:
        check_notebook(content, 2**19)
    assert said in str(caught.value)


def test_the_receipt_counts_versions_and_marks_late_only_after_the_deadline():
    due = parse_deadline(DUE)
    on_time = make_receipt("lab1", "alice", NOTEBOOK, 3, due, [], {"lab1": DUE})
    assert on_time.late is False and on_time.version == 1  # at the deadline: on time
    assert on_time.deadline == "2027-01-15T22:59:00+00:00"
    assert on_time.sha256 == hashlib.sha256(NOTEBOOK).hexdigest()
    assert on_time.bytes == len(NOTEBOOK) and on_time.cells == 3
    assert on_time.path == f"submissions/lab1/alice/{on_time.stamp}/lab1.ipynb"
    later = due + timedelta(microseconds=1)
    late = make_receipt("lab1", "alice", NOTEBOOK, 3, later, [on_time.stamp, "junk"], {"lab1": DUE})
    assert late.late is True and late.version == 2 and late.stamp > on_time.stamp
    free = make_receipt("lab2", "alice", NOTEBOOK, 3, later, [], {"lab1": DUE})
    assert free.deadline is None and free.late is False


def test_stamps_are_utc_sortable_folder_names():
    when = datetime(2026, 12, 7, 23, 15, 0, 123456, tzinfo=UTC)
    assert stamp(when) == "20261207T231500.123456Z"
    assert stamp(when.astimezone(datetime.now().astimezone().tzinfo)) == stamp(when)
    assert is_stamp(stamp(when)) and not is_stamp("receipt.json")


def test_the_command_finds_the_notebook_here_then_in_the_home(tmp_path: Path):
    here, home = tmp_path / "here", tmp_path / "home"
    here.mkdir(), home.mkdir()
    (home / "lab1.ipynb").write_bytes(NOTEBOOK)
    assert notebook_for("lab1", None, here, home) == home / "lab1.ipynb"
    (here / "lab1.ipynb").write_bytes(NOTEBOOK)
    assert notebook_for("lab1.ipynb", None, here, home) == here / "lab1.ipynb"
    with pytest.raises(HandInFailed, match=r"scalelab submit lab2 path/to/notebook\.ipynb"):
        notebook_for("lab2", None, here, home)
    with pytest.raises(HandInFailed, match="no notebook"):
        notebook_for("lab1", str(tmp_path / "gone.ipynb"), here, home)


def test_the_receipt_line_says_version_time_and_lateness():
    due = parse_deadline(DUE)
    late = make_receipt("lab1", "a", NOTEBOOK, 3, due + timedelta(hours=1), [], {"lab1": DUE})
    line = receipt_line(late.as_dict())
    assert line.startswith("lab1 version 1, handed in 2027-01-15 23:59:00 UTC, LATE (deadline ")
    assert f"{len(NOTEBOOK):,} bytes, 3 cells" in line
    free = make_receipt("lab2", "a", NOTEBOOK, 3, due, [], {})
    assert "no deadline" in receipt_line(free.as_dict())


def test_outside_a_server_the_command_sends_nothing(tmp_path: Path):
    with pytest.raises(HandInFailed, match="not a terminal of a course server"):
        submit("lab1", None, environ={"JUPYTERHUB_USER": "alice"})


def test_the_bound_on_versions_counts_versions_only_and_zero_is_none():
    versions = [stamp(datetime(2026, 12, 7, 12, 0, i, tzinfo=UTC)) for i in range(3)]
    check_room("lab1", [*versions[:2], "receipt.json", "junk"], 3)  # two versions: room
    with pytest.raises(HandInLimitError, match="handed in lab1 3 times, the course's limit"):
        check_room("lab1", versions, 3)
    check_room("lab1", versions * 100, 0)
    with pytest.raises(TraitError, match="use 0 or more"):
        HandIn(config=Config({"HandIn": {"max_versions": -1}}))


def test_the_version_collected_is_the_latest_at_or_before_the_cut_off():
    times = [datetime(2027, 1, 15, 22, m, tzinfo=UTC) for m in (0, 30, 59)]
    receipts = [{"stamp": stamp(t), "version": i + 1} for i, t in enumerate(times)]
    shuffled = [receipts[2], receipts[0], receipts[1]]
    assert chosen_version(shuffled, None) == (receipts[2], 0)
    assert chosen_version(shuffled, times[1]) == (receipts[1], 1)  # at the cut-off: taken
    assert chosen_version(shuffled, times[1] - timedelta(microseconds=1)) == (receipts[0], 2)
    assert chosen_version(shuffled, times[0] - timedelta(seconds=1)) == (None, 3)
    assert chosen_version([], None) == (None, 0)


def test_the_instructors_view_has_every_student_and_who_left_since():
    from scalelab.hub_ext.hub.submissions_page import rows_csv, view_rows

    receipt = {"version": 2, "submitted_at": "2027-01-15T22:00:00+00:00", "late": True}
    handed = [
        {"user": "bob", "receipt": receipt, "after": 0, "versions": 2},
        {"user": "gone", "receipt": None, "after": 1, "versions": 1},  # only after a cut-off
    ]
    rows = view_rows(["carol", "bob"], handed)
    assert [(r["user"], r["versions"], r["latest"], r["late"]) for r in rows] == [
        ("bob", 2, 2, True),
        ("carol", 0, None, None),
        ("gone", 1, None, None),
    ]
    assert rows_csv(rows).splitlines() == [
        "user,versions,latest,submitted_at,late",
        "bob,2,2,2027-01-15T22:00:00+00:00,True",
        "carol,0,,,",
        "gone,1,,,",
    ]
