"""Live logs and the Spark UI through the hub: the pure parts of the log handlers. The rest runs
through a real ``scalelab up`` in ``tests/integration/hub/test_live_logs.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

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
