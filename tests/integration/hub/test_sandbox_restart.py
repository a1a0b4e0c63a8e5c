"""A sandboxed server across a hub restart (issue 31): ``scalelab up`` run as root with system
users and ``c.JupyterHub.cleanup_servers = False``. The hub's API reaches a sandboxed server's
network namespace only through a relay in the hub's process (:mod:`scalelab.spawner.host_relay`),
which ends with that process; the restarted hub, finding the server running (``poll``), makes
it again, so the server and its kernels reach the hub as before."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from scalelab.common.processes import pid_runs
from scalelab.spawner import netns
from tests.support import sandboxes
from tests.support.hubproc import ScaleLabUp, execute, server_process
from tests.support.sysusers import MARKS, remove_users

pytestmark = MARKS

STUDENT = "erin"
#: Kept running across the restart, as an operator who upgrades the hub mid-lab would.
CONFIG = "c.JupyterHub.cleanup_servers = False\n"
#: Runs in the student's kernel: the hub's API answers from inside the sandbox (its status).
REACH_HUB = """
import os, urllib.request
print(urllib.request.urlopen(os.environ["JUPYTERHUB_API_URL"] + "/", timeout=20).status)
"""


def _reaches_hub(hub: ScaleLabUp, kernel_id: str) -> str:
    out = asyncio.run(execute(hub, STUDENT, kernel_id, REACH_HUB))
    assert out["error"] is None, out
    return out["stdout"].strip().splitlines()[-1]


def test_a_sandboxed_server_reaches_the_restarted_hub_through_a_new_relay():
    remove_users([STUDENT])
    base = Path(tempfile.mkdtemp(prefix="scalelab-sandbox-restart-"))
    base.chmod(0o711)  # others may enter it, as /var/lib
    hubs: list[ScaleLabUp] = []
    try:
        first = ScaleLabUp(
            base / "state", extra_config=CONFIG, shared_identity=False, warm_spark=True
        )
        hubs.append(first)
        first.start()
        first.start_server(STUDENT)
        sandbox = first.api("GET", f"/users/{STUDENT}").json()["servers"][""]["state"]
        namespace = sandbox["scalelab_sandbox"]["netns"]
        kernel_id = first.server_api(STUDENT, "POST", "/kernels", json={}).json()["id"]
        assert _reaches_hub(first, kernel_id) == "200"
        server = server_process(first, STUDENT).pid
        assert first.interrupt() == 0
        # the hub and its relay are gone; the server, its kernel and its sandbox are not
        assert pid_runs(server) and (netns.NETNS_DIR / namespace).exists()

        second = ScaleLabUp(
            base / "state",
            extra_config=CONFIG,
            port=first.port,
            shared_identity=False,
            warm_spark=True,
        )
        hubs.append(second)
        second.start()
        found = second.api("GET", f"/users/{STUDENT}").json()["servers"][""]
        assert found["ready"] and found["state"]["pid"] == server  # found, not started again
        assert _reaches_hub(second, kernel_id) == "200"  # through the new hub's relay

        assert second.api("DELETE", f"/users/{STUDENT}/server").status_code in (202, 204)
        deadline = time.monotonic() + 60
        while second.api("GET", f"/users/{STUDENT}").json()["servers"]:
            assert time.monotonic() < deadline, "the server was not stopped"
            time.sleep(0.5)
        assert not pid_runs(server) and not (netns.NETNS_DIR / namespace).exists()
    finally:
        for hub in reversed(hubs):
            hub.kill()
        for proc in psutil.process_iter(["username"]):  # a failed run's server, kept running
            if proc.info["username"] == f"jupyter-{STUDENT}":
                proc.kill()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        sandboxes.remove(
            line.split()[0]
            for line in listed.splitlines()
            if line.startswith(f"scalelab-runtime-{STUDENT}-")
        )
        remove_users([STUDENT])
        shutil.rmtree(base, ignore_errors=True)
