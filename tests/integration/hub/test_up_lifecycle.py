"""``scalelab up`` stopped every way a terminal or an operator stops it: SIGHUP (the terminal
closed) and SIGTERM stop it cleanly, SIGKILL still takes the hub, its proxy and servers with it,
and a hub an earlier run left behind is named by the next ``scalelab up``. Real JupyterHub,
configurable-http-proxy and single-user servers."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import psutil
import pytest

from scalelab.commands.up import find_proxy
from scalelab.common.ports import free_port
from tests.support.hubproc import READY_LINE, PlainHub, ScaleLabUp, running

#: Generous: on a loaded 2-core machine the hub may take a while to stop its servers.
GONE_TIMEOUT_S = 180


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an orphan's zombie may wait for PID 1 to reap it)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _processes_of(state: Path) -> list[psutil.Process]:
    """Every live process started for ``state``: its hub (``-f <state>/...``) and the servers
    and kernels whose home is under it."""
    found = []
    for proc in psutil.process_iter():
        try:
            if str(state) in " ".join(proc.cmdline()) or proc.environ().get("HOME", "").startswith(
                str(state)
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return [p for p in found if _alive(p)]


def _wait_gone(procs: list[psutil.Process], state: Path) -> list[psutil.Process]:
    """Wait until ``procs`` and every process of ``state`` ended; return the survivors."""
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while time.monotonic() < deadline:
        left = {p.pid: p for p in [*procs, *_processes_of(state)] if _alive(p)}
        if not left:
            return []
        time.sleep(1)
    return list(left.values())


def _kill_all(procs: list[psutil.Process], state: Path) -> None:
    for proc in [*procs, *_processes_of(state)]:
        try:
            proc.kill()
        except psutil.Error:
            pass


def _describe(procs: list[psutil.Process]) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        try:
            out.append((p.pid, " ".join(p.cmdline())[:120]))
        except psutil.Error:
            out.append((p.pid, "?"))
    return out


def test_sigkill_of_scalelab_up_stops_hub_proxy_and_servers_and_a_new_up_starts(tmp_path: Path):
    state = tmp_path / "state"
    up = ScaleLabUp(state)
    started: list[psutil.Process] = []
    try:
        up.start()
        up.start_server("alice")
        started = up.descendants()
        cmdlines = [" ".join(p.cmdline()) for p in started]
        assert any("configurable-http-proxy" in c for c in cmdlines), cmdlines
        assert any("jupyterhub.singleuser" in c for c in cmdlines), cmdlines

        assert up.proc is not None
        up.proc.send_signal(signal.SIGKILL)  # no handler, no cleanup of ours runs
        assert up.proc.wait(timeout=60) == -signal.SIGKILL

        left = _wait_gone(started, state)
        assert left == [], f"left running after kill -9: {_describe(left)}"
        assert not (state / "jupyterhub.pid").exists()  # the hub stopped as on a normal stop

        again = ScaleLabUp(state, port=up.port)  # same folder, same port
        with running(again):
            assert f"ScaleLab is running at http://127.0.0.1:{up.port}/" in "".join(again.output)
    finally:
        up.kill()
        _kill_all(started, state)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_sighup_stops_scalelab_up_cleanly_like_sigterm(tmp_path: Path, sig: signal.Signals):
    state = tmp_path / "state"
    up = ScaleLabUp(state)
    started: list[psutil.Process] = []
    try:
        up.start()
        started = up.descendants()
        assert started, "the hub and its proxy run under scalelab up"
        assert up.proc is not None
        up.proc.send_signal(sig)
        assert up.proc.wait(timeout=GONE_TIMEOUT_S) == 0
        assert "Stopping ScaleLab: servers, proxy, hub" in "".join(up.output)
        left = _wait_gone(started, state)
        assert left == [], f"left running after {sig.name}: {_describe(left)}"
    finally:
        up.kill()
        _kill_all(started, state)


def _take_terminal() -> None:
    """In the child, after setsid: make its stdin (the pty) its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_closing_the_terminal_stops_scalelab_up_cleanly(tmp_path: Path):
    """A real terminal hang-up: ``scalelab up`` runs on a pseudo-terminal, which is closed. The
    kernel sends SIGHUP, and the "Stopping" line then meets a terminal that is gone (EIO)."""
    state = tmp_path / "state"
    up = ScaleLabUp(state)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        up.argv, env=up.env, stdin=slave, stdout=slave, stderr=slave,
        start_new_session=True, preexec_fn=_take_terminal,
    )  # fmt: skip
    os.close(slave)
    started: list[psutil.Process] = []
    try:
        seen = b""
        deadline = time.monotonic() + 240
        while READY_LINE.encode() not in seen:
            assert time.monotonic() < deadline and proc.poll() is None, seen.decode()[-2000:]
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 65536)
        started = psutil.Process(proc.pid).children(recursive=True)
        assert started
        os.close(master)  # the terminal window closes
        master = -1
        assert proc.wait(timeout=GONE_TIMEOUT_S) == 0
        left = _wait_gone(started, state)
        assert left == [], f"left running after the terminal closed: {_describe(left)}"
    finally:
        if master != -1:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_all(started, state)


def test_a_hub_left_from_an_earlier_run_is_named_not_the_proxy_on_the_port(tmp_path: Path):
    state = (tmp_path / "state").resolve()
    hub = PlainHub(state)  # the hub of an earlier `scalelab up`: same state folder layout
    try:
        hub.start()
        assert hub.proc is not None
        up = ScaleLabUp(state, port=hub.port)
        result = subprocess.run(up.argv, env=up.env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result
        assert result.stderr == (
            f"scalelab: error: a hub of an earlier `scalelab up` is still running for {state} "
            f"(pid {hub.proc.pid}); stop it with `kill {hub.proc.pid}`\n"
        )
        assert hub.proc.poll() is None  # refused, and the running hub left alone
    finally:
        hub.close()


def test_a_proxy_left_without_its_hub_is_named_too(tmp_path: Path):
    state = (tmp_path / "state").resolve()
    state.mkdir()
    port = free_port()
    argv = [*find_proxy(), "--ip", "127.0.0.1", "--port", str(port)]
    argv += ["--api-ip", "127.0.0.1", "--api-port", str(free_port())]
    proxy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        (state / "jupyterhub-proxy.pid").write_text(str(proxy.pid))  # as JupyterHub writes it
        deadline = time.monotonic() + 60
        while not any(c.laddr.port == port for c in psutil.Process(proxy.pid).net_connections()):
            assert time.monotonic() < deadline and proxy.poll() is None, "the proxy did not start"
            time.sleep(0.5)
        up = ScaleLabUp(state, port=port)
        result = subprocess.run(up.argv, env=up.env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result
        assert result.stderr == (
            f"scalelab: error: a proxy of an earlier `scalelab up` is still running for {state} "
            f"(pid {proxy.pid}) without its hub; stop it with `kill {proxy.pid}`\n"
        )
    finally:
        proxy.kill()
        proxy.wait()
