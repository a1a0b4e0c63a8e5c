"""A hub restart with servers still running: every GPU stays with its server, none is given
twice, and a server that died while the hub was down gives its GPU back at the first poll.

The hub here is JupyterHub itself (``python -m jupyterhub``) on ScaleLab's generated
configuration, set to leave servers and proxy running when it stops, as ops run a course hub;
the GPUs are a declared inventory of two fakes (no GPU on this machine)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.hubproc import TWO_FAKE_GPUS, PlainHub


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


@pytest.mark.integration
def test_restart_keeps_every_gpu_with_its_server_and_frees_the_dead_ones(tmp_path: Path):
    hub = PlainHub(
        tmp_path / "state",
        TWO_FAKE_GPUS
        + "c.JupyterHub.cleanup_servers = False\n"  # servers outlive the hub, as ops run it
        + "c.JupyterHub.cleanup_proxy = False\n",
    )
    try:
        hub.start()
        hub.start_server("alice", {"profile": "gpu-1"})
        hub.start_server("bob", {"profile": "gpu-1"})
        before = hub.holders()
        assert sorted(before.values()) == ["alice", "bob"]
        alice_gpu = next(g for g, u in before.items() if u == "alice")
        bob_gpu = next(g for g, u in before.items() if u == "bob")

        hub.stop()
        alice_pid = _server_pid(hub, "alice")
        os.kill(_server_pid(hub, "bob"), signal.SIGKILL)  # dies while the hub is down
        hub.start()

        assert psutil.pid_exists(alice_pid)  # the restart did not touch her server
        deadline = time.monotonic() + 60
        while hub.holders() != {alice_gpu: "alice", bob_gpu: None} and time.monotonic() < deadline:
            time.sleep(1)
        assert hub.holders() == {alice_gpu: "alice", bob_gpu: None}
        hub.start_server("carol", {"profile": "gpu-1"})
        assert hub.holders() == {alice_gpu: "alice", bob_gpu: "carol"}  # never alice's GPU twice
        for user in ("alice", "carol"):
            hub.api("DELETE", f"/users/{user}/server")
    finally:
        hub.close()
