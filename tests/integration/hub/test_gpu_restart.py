"""A hub restart with servers still running: every GPU stays with its server, none is given
twice, a server that died while the hub was down gives its GPU back at the first poll, and the
queue comes back: waiting spawns are started again in their original order.

The hub here is JupyterHub itself (``python -m jupyterhub``) on ScaleLab's generated
configuration, set to leave servers and proxy running when it stops, as ops run a course hub;
the GPUs are a declared inventory of two fakes (no GPU on this machine)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil

from tests.support.hubproc import TWO_FAKE_GPUS, PlainHub


def _server_pid(hub: PlainHub, user: str) -> int:
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if (
                "jupyterhub.singleuser" in (proc.info["cmdline"] or [])
                and proc.environ().get("JUPYTERHUB_USER") == user
                and proc.environ().get("HOME", "").startswith(str(hub.state))
            ):
                return proc.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no server process of {user}")


def _queue(hub: PlainHub) -> list[str]:
    return [q["user"] for q in hub.api("GET", "/scalelab/gpus").json()["queue"]]


def _until(check, hub: PlainHub, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(1)
    assert check(), (hub.state / "hub.log").read_text()[-4000:]


def test_restart_keeps_every_gpu_and_the_queue_and_frees_the_dead_ones(tmp_path: Path):
    hub = PlainHub(
        tmp_path / "state",
        TWO_FAKE_GPUS
        + "c.JupyterHub.cleanup_servers = False\n"  # servers outlive the hub, as ops run it
        + "c.JupyterHub.cleanup_proxy = False\n"
        + "c.ScaleLabSpawner.poll_interval = 2\n",
    )
    queue_file = tmp_path / "state" / "gpu-queue.json"
    try:
        hub.start()
        hub.start_server("alice", {"profile": "gpu-1"})
        hub.start_server("bob", {"profile": "gpu-1"})
        before = hub.holders()
        assert sorted(before.values()) == ["alice", "bob"]
        alice_gpu = next(g for g, u in before.items() if u == "alice")
        bob_gpu = next(g for g, u in before.items() if u == "bob")
        for user in ("carol", "dave"):  # both wait, carol first
            hub.api("POST", f"/users/{user}")
            answer = hub.api(
                "POST", f"/users/{user}/server", json={"user_options": {"profile": "gpu-1"}}
            )
            assert answer.status_code == 202, answer.text
            _until(lambda u=user: u in _queue(hub), hub)
        assert _queue(hub) == ["carol", "dave"]
        saved = json.loads(queue_file.read_text())["queue"]
        assert [(q["user"], q["user_options"]) for q in saved] == [
            (user, {"profile": "gpu-1", "gpus": 1, "spark_driver_memory": "1g"})
            for user in ("carol", "dave")
        ]

        hub.stop()
        assert [q["user"] for q in json.loads(queue_file.read_text())["queue"]] == [
            "carol",
            "dave",
        ]  # the hub's shutdown kept the queue on disk
        alice_pid = _server_pid(hub, "alice")
        os.kill(_server_pid(hub, "bob"), signal.SIGKILL)  # dies while the hub is down
        hub.start()

        assert psutil.pid_exists(alice_pid)  # the restart did not touch her server
        log = (tmp_path / "state" / "hub.log").read_text()
        assert "2 request(s) restored from" in log
        # bob's GPU goes to carol, the head of the restored queue; dave still waits, first now
        _until(lambda: hub.holders() == {alice_gpu: "alice", bob_gpu: "carol"}, hub)
        assert _queue(hub) == ["dave"]
        carol = hub.api("GET", "/users/carol").json()["servers"][""]
        _until(lambda: hub.api("GET", "/users/carol").json()["servers"][""]["ready"], hub)
        assert carol["user_options"] == saved[0]["user_options"]
        # alice stops: her GPU goes to dave; never a GPU given twice
        assert hub.api("DELETE", "/users/alice/server").status_code in (202, 204)
        _until(lambda: hub.holders() == {alice_gpu: "dave", bob_gpu: "carol"}, hub)
        assert json.loads(queue_file.read_text())["queue"] == []
        for user in ("carol", "dave"):
            hub.api("DELETE", f"/users/{user}/server")
    finally:
        hub.close()
