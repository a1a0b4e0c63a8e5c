"""Fault drills on ``scalelab up`` (issue 12): nothing it started outlives it, however it ends;
``c.JupyterHub.cleanup_servers = False`` keeps servers and their GPUs across a restart; the
banner after an unclean stop says what it found and did; a refused start leaves no skeleton in
the state folder. Real JupyterHub, configurable-http-proxy and single-user servers.

The parts that need no running service: ``tests/unit/test_up_faults.py``.
"""

from __future__ import annotations

import contextlib
import http.server
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.hub.test_up_lifecycle import _alive, _describe, _kill_all, _wait_gone
from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running


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
