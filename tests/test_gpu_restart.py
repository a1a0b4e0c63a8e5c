"""A hub restart with servers still running: every GPU stays with its server, none is given
twice, and a server that died while the hub was down gives its GPU back at the first poll.

The hub here is JupyterHub itself (``python -m jupyterhub``) on ScaleLab's generated
configuration, set to leave servers and proxy running when it stops, as ops run a course hub;
the GPUs are a declared inventory of two fakes (no GPU on this machine)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from scalelab.hub_ext.hubconfig import UpSettings, config_file_text
from scalelab.hub_ext.up import find_proxy, free_port
from scalelab.kernels.specs import install_kernelspecs
from tests.hubproc import TWO_FAKE_GPUS


class Hub:
    """``python -m jupyterhub`` on ScaleLab's configuration; restartable on the same state."""

    def __init__(self, state: Path):
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        settings = UpSettings(
            state_dir=str(state),
            store_url=(state / "store").as_uri(),
            proxy_command=find_proxy(),
            hub_port=free_port(),
            proxy_api_port=free_port(),
            port=self.port,
        )
        (state / "homes").mkdir(parents=True)
        ops = state / "ops_config.py"
        ops.write_text(
            TWO_FAKE_GPUS
            + "c.JupyterHub.cleanup_servers = False\n"
            + "c.JupyterHub.cleanup_proxy = False\n"
            + f"c.JupyterHub.services = [{{'name': 'tests', 'api_token': {self.token!r}}}]\n"
            + "c.JupyterHub.load_roles = [{'name': 'admin', 'services': ['tests']}]\n"
        )
        install_kernelspecs(state / "share" / "jupyter")
        self.config = state / "jupyterhub_config.py"
        self.config.write_text(config_file_text(settings, str(ops)))
        self.proc: subprocess.Popen | None = None
        self.log = open(state / "hub.log", "ab")

    def start(self) -> None:
        env = {**os.environ, "SCALELAB_PASSWORD": secrets.token_urlsafe(12)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.config)],
            cwd=self.state, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            assert self.proc.poll() is None, (self.state / "hub.log").read_text()[-3000:]
            time.sleep(0.5)
        raise AssertionError("the hub did not start")

    def stop(self) -> None:
        """SIGTERM the hub; servers and proxy keep running (cleanup_* = False)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"token {self.token}"}
        return requests.request(
            method, f"{self.url}/hub/api{path}", headers=headers, timeout=30, **kwargs
        )

    def start_server(self, user: str, options: dict) -> None:
        if self.api("GET", f"/users/{user}").status_code == 404:
            self.api("POST", f"/users/{user}")
        self.api("POST", f"/users/{user}/server", json={"user_options": options})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            server = self.api("GET", f"/users/{user}").json()["servers"].get("")
            if server and server["ready"]:
                return
            time.sleep(0.5)
        raise AssertionError(f"{user}'s server never got ready")

    def holders(self) -> dict[str, str | None]:
        board = self.api("GET", "/scalelab/gpus").json()
        return {g["uuid"]: g["holder"]["user"] if g["holder"] else None for g in board["gpus"]}

    def close(self) -> None:
        """Kill everything started from this state folder: hub, proxy, servers."""
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
                if str(self.state) in " ".join(proc.cmdline()) or env.get("HOME", "").startswith(
                    str(self.state)
                ):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        pid_file = self.state / "jupyterhub-proxy.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _server_pid(hub: Hub, user: str) -> int:
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
    hub = Hub(tmp_path / "state")
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
