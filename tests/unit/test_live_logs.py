"""Live logs and the Spark UI through the hub: the pure parts of the log handlers. The rest runs
through a real ``scalelab up`` in ``tests/integration/hub/test_live_logs.py``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from scalelab.hub_ext.hub.server_logs import open_student_log, read_lines, student_log_names
from scalelab.hub_ext.server.logstream import (
    add_server_log_file,
    list_logs,
    log_dir,
    log_path,
    tail_start,
)


def test_log_dir_from_the_environment_or_the_home(tmp_path: Path):
    assert log_dir({"SCALELAB_LOG_DIR": str(tmp_path)}) == tmp_path
    assert log_dir({"HOME": "/home/alice"}) == Path("/home/alice/.scalelab/logs")


@pytest.mark.parametrize(
    "name",
    ["../server.log", "..", "server.txt", ".hidden.log", "a/b.log", "/etc/passwd", "link.log"],
)
def test_only_plain_log_files_in_the_folder_are_served(tmp_path: Path, name: str):
    (tmp_path / "server.log").write_text("x\n")
    (tmp_path / "server.txt").write_text("x\n")
    (tmp_path / ".hidden.log").write_text("x\n")
    (tmp_path / "link.log").symlink_to(tmp_path / "server.log")
    assert log_path(tmp_path, name) is None
    assert log_path(tmp_path, "server.log") == tmp_path / "server.log"
    assert [log["name"] for log in list_logs(tmp_path)] == ["server.log"]


def test_a_log_named_hidden_is_not_listed(tmp_path: Path):
    for name in ("server.log", "spark-driver-41.log", "spark-driver-42.log"):
        (tmp_path / name).write_text("x\n")
    listed = {log["name"] for log in list_logs(tmp_path, frozenset({"spark-driver-42.log"}))}
    assert listed == {"server.log", "spark-driver-41.log"}


def test_tail_start():
    assert tail_start(100, 10) == 90
    assert tail_start(5, 10) == 0
    assert tail_start(100, -1) == 100


def test_server_log_is_teed_once(tmp_path: Path):
    logger = logging.getLogger("scalelab-test-tee")
    try:
        path = add_server_log_file(logger, tmp_path)
        add_server_log_file(logger, tmp_path)
        assert len(logger.handlers) == 1
        logger.warning("hello %s", "file")
        logger.handlers[0].flush()
        assert "hello file" in path.read_text()
    finally:
        for handler in logger.handlers:
            handler.close()
        logger.handlers.clear()


STUDENT_UID = 54321  # no account needed: ownership is all that is compared


def _student_home(tmp_path: Path) -> Path:
    """A home owned by another uid, its ``.scalelab/logs`` with a driver's log."""
    home = tmp_path / "home"
    logs = home / ".scalelab" / "logs"
    logs.mkdir(parents=True)
    (logs / "spark-driver-77.log").write_text("Submitted application: scalelab-x\n")
    for path in (home, home / ".scalelab", logs, logs / "spark-driver-77.log"):
        os.chown(path, STUDENT_UID, STUDENT_UID)
    return home


@pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another uid: needs root (CI)")
def test_the_hub_reads_a_students_own_driver_log_and_nothing_they_plant(tmp_path: Path):
    home = _student_home(tmp_path)
    logs = home / ".scalelab" / "logs"
    secret = tmp_path / "root-only.txt"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    (logs / "spark-driver-1.log").symlink_to(secret)  # a link to a file the student cannot read
    os.link(secret, logs / "spark-driver-2.log")  # a hard link: root's file, root's uid
    assert student_log_names(str(home)) == ["spark-driver-77.log"]
    lines, _ = read_lines(lambda: open_student_log(str(home), "spark-driver-77.log"), 0)
    assert lines == [("Submitted application: scalelab-x", 34)]  # 33 characters and a newline
    for planted, error in (
        ("spark-driver-1.log", "Too many levels"),
        ("spark-driver-2.log", "not a log file"),
    ):
        with pytest.raises(OSError, match=error):
            open_student_log(str(home), planted)
    # A link on the way to the folder serves nothing either.
    moved = tmp_path / "elsewhere"
    (home / ".scalelab").rename(moved)
    (home / ".scalelab").symlink_to(moved)
    assert student_log_names(str(home)) == []
    with pytest.raises(OSError, match=r"Too many levels|Not a directory"):
        open_student_log(str(home), "spark-driver-77.log")


@pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another uid: needs root (CI)")
def test_a_log_folder_someone_else_owns_is_not_the_students(tmp_path: Path):
    home = _student_home(tmp_path)
    os.chown(home / ".scalelab" / "logs", 0, 0)
    assert student_log_names(str(home)) == []
    with pytest.raises(PermissionError, match="is not the student's own"):
        open_student_log(str(home), "spark-driver-77.log")
