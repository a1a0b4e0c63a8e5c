"""A failed server start explained at once (issue 12): a server that exits while starting fails
the spawn within about a second with its exit status and last lines (secrets masked), through
REST and the pending page; nothing stays held and the next start without options does not ask
for the failed request again; a full home names its disk, and a server still starts on a full
home (its Jupyter runtime folder is outside it).

Pure parts on their own; then one real ``scalelab up`` with declared (fake) GPUs and a server
command that fails on purpose for some users.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scalelab.spawner.start_watch import (
    LINE_CHARS,
    describe_exit,
    failed_start_message,
    full_disk_path,
    log_tail,
    redact,
    wait_listening,
)
from tests.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running
from tests.test_diskspace import fill, tmpfs

# -- pure parts -----------------------------------------------------------------------------------


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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_wait_ends_with_the_exit_status_of_a_process_that_ends_first():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
    assert asyncio.run(wait_listening("127.0.0.1", _free_port(), proc.poll, 60)) == 7


def test_the_wait_ends_when_the_port_listens():
    port = _free_port()
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
            asyncio.run(wait_listening("127.0.0.1", _free_port(), proc.poll, 0.5))
    finally:
        proc.kill()
        proc.wait()


# -- on a real hub --------------------------------------------------------------------------------

#: The server command: fails with a GPU, fails "on a full disk" for dave, else a real server.
SERVER_SCRIPT = """#!/bin/sh
if [ -n "$CUDA_VISIBLE_DEVICES" ]; then
  echo "boom: cannot init CUDA on $CUDA_VISIBLE_DEVICES" >&2
  echo "token=$JUPYTERHUB_API_TOKEN" >&2
  exit 3
fi
if [ "$USER" = dave ]; then
  echo "OSError: [Errno 28] No space left on device: '$HOME/.local/share/jupyter'" >&2
  exit 1
fi
exec {python} -m jupyterhub.singleuser "$@"
"""


def _progress_events(up: ScaleLabUp, user: str) -> str:
    return up.api("GET", f"/users/{user}/server/progress").text


@pytest.mark.integration
def test_failed_starts_on_a_real_hub(tmp_path: Path):
    script = tmp_path / "server.sh"
    script.write_text(SERVER_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    state = tmp_path / "state"
    up = ScaleLabUp(
        state, extra_config=TWO_FAKE_GPUS + f"c.ScaleLabSpawner.cmd = [{str(script)!r}]\n"
    )
    with running(up):
        for user in ("alice", "bob", "carol", "dave"):
            assert up.api("POST", f"/users/{user}").status_code == 201

        # A GPU start whose server exits: the REST start answers at once with the reason.
        # (A start slower than JupyterHub's slow_spawn_timeout, 10 s, would answer 202.)
        answer = up.api("POST", "/users/alice/server", json={"user_options": {"profile": "gpu-1"}})
        assert answer.status_code == 503, answer.text
        message = answer.json()["message"]
        assert message.startswith("Your server stopped while starting (exit status 3).")
        assert "boom: cannot init CUDA on GPU-fake-" in message
        assert "token=<hidden>" in message
        assert "/hub/scalelab/logs/alice" in message
        token_lines = [line for line in message.splitlines() if line.startswith("token=")]
        assert token_lines == ["token=<hidden>"]
        progress = _progress_events(up, "alice")
        assert '"failed": true' in progress and "<pre>boom: cannot init CUDA" in progress
        hub_log = (state / "logs" / "jupyterhub.log").read_text()
        assert "Not starting alice's server" in hub_log and "boom: cannot init CUDA" in hub_log
        assert "InvalidStateError" not in hub_log

        # Nothing stays held: bob gets both GPUs (his server fails too, and frees them again).
        bob = up.api("POST", "/users/bob/server", json={"user_options": {"profile": "gpu-2"}})
        assert bob.status_code == 503 and "GPU-fake-0000,GPU-fake-0001" in bob.json()["message"]

        # The next start without options does not ask for the failed GPU request again.
        model = up.start_server("alice")
        assert model["user_options"] == {}

        # A server on a full home starts: its runtime folder is outside the home.
        home = state / "homes" / "carol"
        with tmpfs(home, "512k"):
            fill(home)
            carol = up.start_server("carol")
            runtime = Path(carol["state"]["scalelab_runtime_dir"])
            assert not runtime.is_relative_to(home)
            assert runtime.stat().st_mode & 0o777 == 0o700
            assert any(runtime.glob("jpserver-*.json"))
            assert up.api("DELETE", "/users/carol/server").status_code in (202, 204)
            _wait_stopped(up, "carol")
            assert not runtime.exists()

        # A start that dies of a full disk names the disk and what to do.
        dave = up.api("POST", "/users/dave/server")
        assert dave.status_code == 503
        text = dave.json()["message"]
        assert (
            "exit status 1" in text and "The disk holding " in text and "Free space there" in text
        )


def _wait_stopped(up: ScaleLabUp, user: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while up.api("GET", f"/users/{user}").json()["servers"]:
        assert time.monotonic() < deadline, f"{user}'s server did not stop"
        time.sleep(0.5)


#: With a GPU: erin's server never listens, frank's answers every request with 503.
HUNG_SCRIPT = """#!/bin/sh
if [ -n "$CUDA_VISIBLE_DEVICES" ] && [ "$USER" = erin ]; then exec sleep 600; fi
if [ -n "$CUDA_VISIBLE_DEVICES" ] && [ "$USER" = frank ]; then exec {python} {unready}; fi
exec {python} -m jupyterhub.singleuser "$@"
"""
#: Serves the server's port (from JUPYTERHUB_SERVICE_URL), never ready: 503 to everything.
UNREADY = """import http.server, os, urllib.parse

class Unready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503)
        self.end_headers()

port = urllib.parse.urlparse(os.environ["JUPYTERHUB_SERVICE_URL"]).port
http.server.HTTPServer(("127.0.0.1", port), Unready).serve_forever()
"""


def _saved_options(state: Path, user: str) -> list[tuple]:
    with sqlite3.connect(state / "jupyterhub.sqlite") as db:
        return db.execute(
            "SELECT s.user_options FROM spawners s JOIN users u ON s.user_id = u.id"
            " WHERE u.name = ?",
            (user,),
        ).fetchall()


@pytest.mark.integration
def test_starts_that_never_answer_fail_once_and_are_not_asked_for_again(tmp_path: Path):
    """A server that never listens fails after http_timeout with its own message (not after
    twice that, nor with JupyterHub's traceback); one that listens but is never ready is given
    up by JupyterHub's own HTTP wait. Either way the GPU is released and the failed request's
    options are forgotten, so the next start without options does not ask for the GPU again."""
    unready = tmp_path / "unready.py"
    unready.write_text(UNREADY)
    script = tmp_path / "server.sh"
    script.write_text(HUNG_SCRIPT.format(python=sys.executable, unready=unready))
    script.chmod(0o755)
    state = tmp_path / "state"
    config = TWO_FAKE_GPUS + (
        f"c.ScaleLabSpawner.cmd = [{str(script)!r}]\nc.Spawner.http_timeout = 3\n"
    )
    up = ScaleLabUp(state, extra_config=config)
    gpu = {"user_options": {"profile": "gpu-1"}}
    with running(up):
        for user in ("erin", "frank"):
            assert up.api("POST", f"/users/{user}").status_code == 201
        erin = up.api("POST", "/users/erin/server", json=gpu)
        assert erin.status_code == 503, erin.text
        assert erin.json()["message"].startswith(
            "Your server did not listen on its port within 3 s (c.Spawner.http_timeout)"
        )
        frank = up.api("POST", "/users/frank/server", json=gpu)
        assert frank.status_code in (202, 500), frank.text  # JupyterHub's own HTTP wait
        for user in ("erin", "frank"):
            _wait_stopped(up, user)
            assert _saved_options(state, user) == [(None,)]
        hub_log = (state / "logs" / "jupyterhub.log").read_text()
        assert "erin/ released GPU(s) GPU-fake-0000" in hub_log
        assert "frank/ released GPU(s) GPU-fake-0000" in hub_log
        assert "erin's server never showed up" not in hub_log  # no second wait
