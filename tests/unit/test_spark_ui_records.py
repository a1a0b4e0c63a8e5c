"""The kernels' Spark UI records and the page that opens the running kernel's Spark UI: the
pure parts and the files they write. The page on a real single-user server with real kernels is
``tests/integration/spark/test_spark_ui_records.py``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from scalelab.kernels.spark_ui_record import (
    SparkUIRecord,
    context_record,
    kernel_id_of,
    parse_record,
    read_records,
    record_name,
    remove_record,
    write_record,
)

KERNEL = "0b6e3c4a-8d55-4f0e-9b7e-2a1d5c3f9e10"


RECORD = SparkUIRecord(KERNEL, 41234, "local-1700000000000", "scalelab-alice", 4321, 1.7e9)


def test_the_kernel_id_comes_from_the_connection_files_name():
    assert kernel_id_of(f"/run/jupyter/kernel-{KERNEL}.json") == KERNEL
    assert kernel_id_of("/run/jupyter/my-connection.json") is None
    assert kernel_id_of("/run/jupyter/kernel-.json") is None
    assert record_name(KERNEL) == f"scalelab-sparkui-{KERNEL}.json"
    with pytest.raises(ValueError, match="not a kernel id"):
        record_name("../../home/alice/x")


def test_a_record_round_trips_and_a_malformed_one_is_none():
    assert parse_record(RECORD.to_json(), KERNEL) == RECORD
    good = json.loads(RECORD.to_json())
    assert parse_record(RECORD.to_json(), "another-kernel") is None  # another kernel's record
    for bad in [
        {**good, "port": 0},
        {**good, "port": 70000},
        {**good, "port": "41234"},
        {**good, "port": True},
        {**good, "pid": 0},
        {**good, "started": "yesterday"},
        {**good, "app_name": None},
        {k: v for k, v in good.items() if k != "app_id"},
    ]:
        assert parse_record(json.dumps(bad), KERNEL) is None, bad
    assert parse_record("not json", KERNEL) is None
    assert parse_record("[1, 2]", KERNEL) is None


def test_records_are_written_private_read_back_and_removed(tmp_path: Path):
    path = write_record(tmp_path, RECORD)
    assert path == tmp_path / record_name(KERNEL)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    (tmp_path / "scalelab-sparkui-broken.json").write_text("{")
    (tmp_path / f"kernel-{KERNEL}.json").write_text("{}")  # a connection file: no record
    assert read_records(tmp_path) == [RECORD]
    remove_record(tmp_path, KERNEL)
    remove_record(tmp_path, KERNEL)  # gone already: nothing to do
    assert read_records(tmp_path) == []
    assert read_records(tmp_path / "missing") == []


class _Conf(dict):
    def get(self, key, default=None):  # SparkConf.get's signature
        return super().get(key, default)


def _context(web_url: str | None, proxy_base: str | None) -> SimpleNamespace:
    """What context_record reads of a SparkContext."""
    conf = _Conf({"spark.ui.proxyBase": proxy_base} if proxy_base is not None else {})
    return SimpleNamespace(
        uiWebUrl=web_url,
        getConf=lambda: conf,
        applicationId="local-1700000000000",
        appName="scalelab-alice",
        startTime=1_700_000_000_500,
    )


def test_only_a_ui_served_behind_the_hub_is_recorded():
    proxied = _context("http://127.0.0.1:41234", "/user/alice/sparkui/41234")
    assert context_record(proxied, KERNEL, 4321) == SparkUIRecord(
        KERNEL, 41234, "local-1700000000000", "scalelab-alice", 4321, 1_700_000_000.5
    )
    # The UI is off; a session of the student's own (no proxy base); Spark moved to another
    # port than the one its proxy base names (its links would be broken behind the hub).
    assert context_record(_context(None, None), KERNEL, 4321) is None
    assert context_record(_context("http://127.0.0.1:4040", None), KERNEL, 4321) is None
    moved = _context("http://127.0.0.1:41235", "/user/alice/sparkui/41234")
    assert context_record(moved, KERNEL, 4321) is None


def test_the_page_keeps_only_records_of_kernels_that_still_run_newest_first():
    from scalelab.kernels.spark_ui_record import live_records

    older = SparkUIRecord("k1", 41001, "local-1", "scalelab-alice", 11, 100.0)
    newer = SparkUIRecord("k2", 41002, "local-2", "scalelab-alice", 12, 200.0)
    shut_down = SparkUIRecord("k3", 41003, "local-3", "scalelab-alice", 13, 300.0)
    restarted = SparkUIRecord("k4", 41004, "local-4", "scalelab-alice", 14, 400.0)  # old pid
    running = {"k1", "k2", "k4"}
    records = [older, shut_down, restarted, newer]
    assert live_records(records, running, lambda pid: pid != 14) == [newer, older]
    assert live_records(records, set(), lambda pid: True) == []


def test_a_kernel_is_named_by_its_notebook_else_its_kernel_name():
    from scalelab.hub_ext.server.spark_ui_page import kernel_labels, spark_ui_url

    sessions = [
        {"path": "lab1/Lab 1.ipynb", "type": "notebook", "kernel": {"id": "k1"}},
        {"path": "console-1", "type": "console", "kernel": {"id": "k1"}},
        {"path": "console-2", "type": "console", "kernel": {"id": "k2"}},
    ]
    names = {"k1": "scalelab-pyspark", "k2": "scalelab-pyspark", "k3": "scalelab-pyspark"}
    assert kernel_labels(sessions, names) == {
        "k1": "lab1/Lab 1.ipynb",
        "k2": "console-2",
        "k3": "scalelab-pyspark",
    }
    assert spark_ui_url("/user/alice/", 41234) == "/user/alice/sparkui/41234/jobs/"


def test_a_port_nobody_listens_on_is_no_spark_ui():
    import socket

    from scalelab.hub_ext.server.spark_ui_page import port_listens

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port_listens(port)
    assert not port_listens(port)


def test_the_page_lists_several_uis_escaped_and_says_when_there_is_none():
    from scalelab.hub_ext.server.spark_ui_page import SparkUIEntry, _env

    page = _env.get_template("spark_ui.html")
    entry = SparkUIEntry(
        "/user/alice/sparkui/41234/jobs/", "<b>x</b>.ipynb", "scalelab-alice", "local-1", "08:00"
    )
    several = page.render(entries=[entry, entry])
    assert several.count('<a href="/user/alice/sparkui/41234/jobs/">') == 2
    assert "&lt;b&gt;x&lt;/b&gt;.ipynb" in several and "<b>x</b>" not in several
    none = page.render(entries=[])
    assert "No kernel of yours runs Spark now" in none and "spark.stop()" in none
