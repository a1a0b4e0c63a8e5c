"""A failed server start explained at once (issue 12): a server that exits while starting fails
the spawn within about a second with its exit status and last lines (secrets masked), through
REST and the pending page; nothing stays held and the next start without options does not ask
for the failed request again; a full home names its disk, and a server still starts on a full
home (its Jupyter runtime folder is outside it).

Pure parts on their own; then one real ``scalelab up`` with declared (fake) GPUs and a server
command that fails on purpose for some users.

The parts that need no running service: ``tests/unit/test_failed_start.py``.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running
from tests.unit.test_diskspace import fill, tmpfs

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
