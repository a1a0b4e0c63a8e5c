"""Fault drills on ``scalelab up`` (issue 12): nothing it started outlives it, however it ends;
``c.JupyterHub.cleanup_servers = False`` keeps servers and their GPUs across a restart; the
banner after an unclean stop says what it found and did; a refused start leaves no skeleton in
the state folder. Real JupyterHub, configurable-http-proxy and single-user servers."""

from __future__ import annotations

import contextlib
import http.server
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scalelab.cli import main
from scalelab.commands.up import free_port
from tests.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running
from tests.test_up_lifecycle import _alive, _describe, _kill_all, _wait_gone


def _proxies_on(port: int) -> list[psutil.Process]:
    """Live configurable-http-proxy processes serving ``port``."""
    found = []
    for proc in psutil.process_iter():
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        if any("configurable-http-proxy" in a for a in argv) and "--port" in argv:
            if argv[argv.index("--port") + 1 :][:1] == [str(port)] and _alive(proc):
                found.append(proc)
    return found


def _listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@contextlib.contextmanager
def _other_http_server() -> Iterator[int]:
    """Another program on a port: an HTTP server that answers every request with an error."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _server_pid(up: ScaleLabUp) -> int:
    pids = [p.pid for p in up.descendants() if "jupyterhub.singleuser" in " ".join(p.cmdline())]
    assert len(pids) == 1, _describe(up.descendants())
    return pids[0]


def _end(pids: list[int]) -> None:
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


# -- 1. no orphaned proxy ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize(
    "setting",
    [
        "c.JupyterHub.hub_port = {port}",
        "c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{port}'",
    ],
    ids=["hub_port taken", "proxy API port taken"],
)
def test_a_hub_that_fails_at_start_leaves_no_proxy_running(tmp_path: Path, setting: str):
    state = tmp_path / "state"
    with _other_http_server() as taken:
        up = ScaleLabUp(state, extra_config=setting.format(port=taken) + "\n")
        try:
            result = subprocess.run(
                up.argv, env=up.env, capture_output=True, text=True, timeout=240
            )
            assert result.returncode == 1, result
            assert "The hub did not start" in result.stdout, result.stdout
            left = _wait_gone(_proxies_on(up.port), state)
            assert left == [], f"left running after a failed start: {_describe(left)}"
        finally:
            _kill_all(_proxies_on(up.port), state)


@pytest.mark.integration
def test_sigterm_while_the_proxy_is_down_leaves_no_proxy_running(tmp_path: Path):
    state = tmp_path / "state"
    up = ScaleLabUp(state)
    started: list[psutil.Process] = []
    try:
        up.start()
        started = up.descendants()
        proxies = _proxies_on(up.port)
        assert len(proxies) == 1, _describe(started)
        proxies[0].kill()  # the proxy dies; the hub starts it again, even while it stops
        proxies[0].wait(timeout=30)
        assert up.proc is not None
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=240) == 0
        left = _wait_gone([*started, *_proxies_on(up.port)], state)
        assert left == [], f"left running after SIGTERM: {_describe(left)}"
        assert _proxies_on(up.port) == []
    finally:
        up.kill()
        _kill_all([*started, *_proxies_on(up.port)], state)


# -- 2. cleanup_servers = False keeps servers and GPUs across a restart ----------------------


@pytest.mark.integration
def test_cleanup_servers_false_keeps_a_server_and_its_gpu_across_a_restart(tmp_path: Path):
    state = tmp_path / "state"
    config = TWO_FAKE_GPUS + "c.JupyterHub.cleanup_servers = False\n"
    first = ScaleLabUp(state, extra_config=config)
    pid = 0
    try:
        with running(first):
            first.start_server("alice", {"profile": "gpu-1"})
            pid = _server_pid(first)
            bob = first.start_server("bob", {"profile": "gpu-1"})["state"]["pid"]
        assert psutil.pid_exists(pid) and _alive(psutil.Process(pid)), "the server was stopped"
        stopped = "".join(first.output)
        assert (
            f"Left 2 server(s) running (c.JupyterHub.cleanup_servers = False): alice/ (pid {pid})"
            in stopped
        )
        assert _proxies_on(first.port) == []  # the proxy and hub went, the servers stayed
        # bob's server dies while no hub runs: its exit status is nobody's to know.
        dead = psutil.Process(bob)
        dead.kill()
        dead.wait(timeout=60)

        second = ScaleLabUp(state, extra_config=config, port=first.port)
        with running(second):
            banner = "".join(second.output)
            assert (
                f"Found 1 server(s) still running, kept: alice/ (pid {pid}, GPU(s) GPU-fake-0000)"
                in banner
            )
            server = second.api("GET", "/users/alice").json()["servers"][""]
            assert server["ready"] and server["state"]["pid"] == pid
            holders = {
                g["uuid"]: g["holder"] for g in second.api("GET", "/scalelab/gpus").json()["gpus"]
            }
            assert holders["GPU-fake-0000"]["user"] == "alice" and holders["GPU-fake-0001"] is None
            hub_log = (state / "logs" / "jupyterhub.log").read_text()
            assert (
                "bob/ died (exit status unknown: it was started before the hub last restarted) "
                "while holding GPU(s) GPU-fake-0001"
            ) in hub_log
            assert "bob/ died (exit status 0)" not in hub_log
            # The kept server still reaches its hub (same hub port): it checks our token there.
            assert second.server_api("alice", "GET", "/status").status_code == 200
            assert second.api("DELETE", "/users/alice/server").status_code in (202, 204)
            deadline = time.monotonic() + 120
            while _alive(psutil.Process(pid)) if psutil.pid_exists(pid) else False:
                assert time.monotonic() < deadline, "the kept server did not stop when asked"
                time.sleep(0.5)
    finally:
        first.kill()
        _end([pid] if pid else [])
        _kill_all([], state)


# -- 3. the banner after an unclean stop -------------------------------------------------------


@pytest.mark.integration
def test_the_next_up_after_an_unclean_stop_says_what_it_found_and_did(tmp_path: Path):
    """``scalelab up`` and its hub both killed outright (as the OOM killer would): the proxy,
    services and a server holding a GPU are left. The next ``up`` stops them, the hub releases
    the GPU, and the banner says so."""
    state = tmp_path / "state"
    first = ScaleLabUp(state, extra_config=TWO_FAKE_GPUS)
    left_behind: list[psutil.Process] = []
    try:
        first.start()
        first.start_server("alice", {"profile": "gpu-1"})
        assert first.proc is not None
        hub = next(p for p in first.descendants() if "jupyterhub" in p.cmdline()[2:3])
        # The proxy and the server (with its kernels) outlive a hub killed outright; the
        # services end with it (their guard has a parent-death signal).
        left_behind = [
            p for p in first.descendants()
            if any(w in " ".join(p.cmdline()) for w in ("http-proxy", "jupyterhub.singleuser"))
        ]  # fmt: skip
        assert len(left_behind) == 2, _describe(first.descendants())
        server = _server_pid(first)
        hub.suspend()  # it cannot act on the SIGTERM its parent's death sends it
        first.proc.kill()
        first.proc.wait(timeout=60)
        hub.kill()
        hub.wait(timeout=60)
        assert all(_alive(p) for p in left_behind), _describe(left_behind)

        second = ScaleLabUp(state, extra_config=TWO_FAKE_GPUS, port=first.port)
        with running(second):
            banner = "".join(second.output)
            line = next(
                (ln for ln in banner.splitlines() if "Found the state of an earlier run" in ln), ""
            )
            assert (
                "Found the state of an earlier run that did not stop cleanly "
                f"(pid {first.proc.pid}): "
                "released GPU(s) GPU-fake-0000 (held by alice/, no longer running); "
                "stopped "
            ) in line, banner
            assert f"jupyterhub.singleuser pid {server}" in line
            assert "configurable-http-proxy pid" in line
            assert not any(_alive(p) for p in left_behind), _describe(left_behind)
            gpus = second.api("GET", "/scalelab/gpus").json()["gpus"]
            assert [g["holder"] for g in gpus] == [None, None]
        assert not (state / "scalelab-up.run.json").exists()  # a clean stop leaves no record
    finally:
        first.kill()
        _kill_all(left_behind, state)


# -- 4. a refused start leaves no skeleton -------------------------------------------------------


def test_a_refused_start_on_a_taken_port_creates_no_state_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        state = tmp_path / "new" / "state"
        args = ["up", "--state-dir", str(state), "--port", str(port), "--shared-identity"]
        assert main(args) == 2
        assert f"port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err
        assert list(tmp_path.iterdir()) == []

        old = tmp_path / "old"
        (old / "homes" / "alice").mkdir(parents=True)
        (old / "homes" / "alice" / "work.ipynb").write_text("{}")
        before = set(old.rglob("*"))
        assert main(["up", "--state-dir", str(old), "--port", str(port), "--shared-identity"]) == 2
        assert "already in use" in capsys.readouterr().err
        assert set(old.rglob("*")) == before  # no logs/, no lock file, homes kept as they were


def test_a_refused_config_file_of_mode_0644_creates_no_state_folder(
    capsys: pytest.CaptureFixture[str],
):
    """Run by root without ``--shared-identity``, students get system users, and a 0644
    ``--config`` is refused after the state folder was opened for them (store folders made)."""
    if not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0:
        pytest.skip("the 0644 refusal is for root, who gives students system users")
    # Under /tmp, reachable by other users (pytest's tmp_path is not): system users apply.
    with tempfile.TemporaryDirectory(dir="/tmp") as top:
        Path(top).chmod(0o755)
        config = Path(top) / "hub_config.py"
        config.write_text("c.JupyterHub.cleanup_servers = True\n")
        config.chmod(0o644)
        port = str(free_port())
        state = Path(top) / "state"
        assert main(["up", "--state-dir", str(state), "--port", port, "--config", str(config)]) == 2
        assert "is readable by other users (mode 0644)" in capsys.readouterr().err
        assert sorted(p.name for p in Path(top).iterdir()) == ["hub_config.py"]

        state.mkdir()
        (state / "notes.txt").write_text("kept")
        assert main(["up", "--state-dir", str(state), "--port", port, "--config", str(config)]) == 2
        assert "mode 0644" in capsys.readouterr().err
        assert [p.name for p in state.rglob("*")] == ["notes.txt"]
