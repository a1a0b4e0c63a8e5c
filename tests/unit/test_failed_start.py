"""A failed server start explained at once (issue 12): the parts that need no running hub, kernel or
cluster. The rest runs for real in ``tests/integration/hub/test_failed_start.py``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from scalelab.common.ports import free_port
from scalelab.spawner.start_watch import (
    LINE_CHARS,
    describe_exit,
    failed_start_message,
    full_disk_path,
    log_tail,
    redact,
    spawn_failure,
    wait_listening,
)


def test_the_tail_is_this_starts_output_only_with_secrets_masked(tmp_path: Path):
    log = tmp_path / "server.log"
    log.write_bytes(b"earlier start: token=aaaa\n")
    offset = log.stat().st_size
    with open(log, "ab") as out:
        out.write(b"one\n\n  \nJUPYTERHUB_API_TOKEN=0123abcd secret\nbad \xff byte\n")
        out.write(b"using 0123abcd here\n" + b"x" * 1000 + b"\n")
    tail = log_tail(log, offset, secrets=["0123abcd"])
    assert tail[0] == "one"
    assert "earlier start" not in "\n".join(tail)
    assert tail[1] == "JUPYTERHUB_API_TOKEN=<hidden> secret"
    assert tail[2] == "bad \ufffd byte"
    assert tail[3] == "using <hidden> here"
    assert len(tail[4]) == LINE_CHARS and tail[4].endswith("…")
    assert log_tail(log, offset, lines=2)[0] == "using 0123abcd here"  # the last two
    assert log_tail(tmp_path / "missing.log") == []


def test_a_long_log_is_read_from_its_end_without_a_partial_first_line(tmp_path: Path):
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i} " + "y" * 50 + "\n" for i in range(5000)))
    tail = log_tail(log, 0, lines=3)
    assert [line.split()[1] for line in tail] == ["4997", "4998", "4999"]


@pytest.mark.parametrize(
    "line, shown",
    [
        ("token=abc123", "token=<hidden>"),
        ("?token=abc&x=1", "?token=<hidden>&x=1"),
        ('{"api_token": "abc"}', '{"api_token": "<hidden>"}'),
        ("AWS_SECRET_ACCESS_KEY: xyz", "AWS_SECRET_ACCESS_KEY: <hidden>"),
        ("password = hunter2", "password = <hidden>"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_secret_values_are_masked(line: str, shown: str):
    assert redact(line) == shown


def test_a_full_disk_in_the_tail_names_the_quoted_path_or_the_home():
    quoted = ["x", "OSError: [Errno 28] No space left on device: '/srv/homes/a/.local/x'"]
    assert full_disk_path(quoted, "/srv/homes/a") == "/srv/homes/a/.local/x"
    assert full_disk_path(["sqlite3: database or disk is full"], "/h") == "/h"
    assert full_disk_path(["[Errno 122] Disk quota exceeded"], None) is None
    assert full_disk_path(["exit 3: cannot init CUDA"], "/h") is None


def test_the_message_says_how_it_ended_its_last_lines_and_where_the_rest_is():
    head = "Your server stopped while starting (exit status 3)."
    text, markup = failed_start_message(head, ["boom <b>"], "its log", "Disk full.")
    assert text.splitlines() == [
        "Your server stopped while starting (exit status 3).",
        "Disk full.",
        "Its last lines:",
        "boom <b>",
        "The whole output is in its log. Nothing was held for you: start again.",
    ]
    assert "<pre>boom &lt;b&gt;</pre>" in markup and "<b>" not in markup
    assert "Its last lines" not in failed_start_message(head, [], "x")[0]


@pytest.mark.parametrize(
    "status, words",
    [
        (None, "still running"),
        (3, "exit status 3"),
        (-9, "killed by SIGKILL, often the out-of-memory killer"),
        (137, "exit status 137: killed by SIGKILL, often the out-of-memory killer"),
        (-11, "killed by SIGSEGV, a crash"),
        (-10, "killed by SIGUSR1"),
        (-99, "killed by signal 99"),
        (127, "exit status 127: the command was not found"),
        (126, "exit status 126: the command cannot be run"),
        (255, "exit status 255"),
    ],
)
def test_exit_statuses_in_words(status, words):
    assert describe_exit(status) == words


def test_the_wait_ends_with_the_exit_status_of_a_process_that_ends_first():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
    assert asyncio.run(wait_listening("127.0.0.1", free_port(), proc.poll, 60)) == 7


def test_the_wait_ends_when_the_port_listens():
    port = free_port()
    code = (
        "import socket, time; s = socket.socket(); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        assert asyncio.run(wait_listening("", port, proc.poll, 60)) is None
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_the_wait_gives_up_after_its_timeout():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(TimeoutError, match="nothing listened"):
            asyncio.run(wait_listening("127.0.0.1", free_port(), proc.poll, 0.5))
    finally:
        proc.kill()
        proc.wait()


def test_a_spawn_failure_shows_the_student_its_message_and_logs_the_operators_line():
    failure = spawn_failure("Your home is missing.", "slurm_no_home", "alice/: /homes/alice")
    assert failure.jupyterhub_message == "Your home is missing."  # pending page, progress
    assert failure.reason == "slurm_no_home"  # the spawn failure metric's label
    assert failure.log_message == "alice/: /homes/alice"
    assert "/homes/alice" not in failure.jupyterhub_message
