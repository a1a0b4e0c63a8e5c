"""``scalelab.configure(c)``: the one way ScaleLab goes into a hub configuration.

Pure tests of what it adds (once, however often it is called), and two real hubs started by plain
``jupyterhub -f`` from an operator's own file, as the operators' guide gives it: one refuses a
misspelt setting in one log line, the other serves ScaleLab's pages and services.

The parts that need no running service: ``tests/unit/test_configure.py``.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests

from scalelab.commands.up import find_proxy
from scalelab.common.ports import free_port
from tests.unit.test_configure import ROOT

GUIDE = ROOT / "docs" / "operators-guide.md"
#: How each of ScaleLab's services shows in the hub's access log once it has called the hub.
CALLERS = ("(scalelab-gpu-monitor@", "(scalelab-idle-culler@")


def _guide_recipe() -> str:
    """The ``jupyterhub_config.py`` the operators' guide gives for an existing hub."""
    text = GUIDE.read_text()
    section = text[text.index("## Installing into an existing JupyterHub") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _hub_file(tmp_path: Path, token: str, port: int, recipe: str) -> Path:
    """A plain hub's config: ports, database and a test service first, then ``recipe``."""
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        f"c.JupyterHub.ip = '127.0.0.1'\nc.JupyterHub.port = {port}\n"
        f"c.JupyterHub.hub_ip = '127.0.0.1'\nc.JupyterHub.hub_port = {free_port()}\n"
        f"c.JupyterHub.db_url = 'sqlite:///{tmp_path / 'hub.sqlite'}'\n"
        f"c.ConfigurableHTTPProxy.command = {find_proxy()!r}\n"
        f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{free_port()}'\n"
        "c.JupyterHub.authenticator_class = 'null'\n"
        "c.JupyterHub.log_level = 'DEBUG'\n"  # the services' routine calls are debug lines
        f"c.JupyterHub.services = [{{'name': 'tests', 'api_token': {token!r}}}]\n"
        "c.JupyterHub.load_roles = [{'name': 'admin', 'services': ['tests']}]\n" + recipe
    )
    return config


def _hub(config: Path, *, sigint_ignored: bool = False) -> subprocess.Popen:
    """``jupyterhub -f config``; ``sigint_ignored``: as a shell script's ``jupyterhub ... &``
    starts it (SIGINT ignored, inherited by every child)."""
    return subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(config)],
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        if sigint_ignored
        else None,
    )


def _sigint(pid: int) -> str:
    """What process ``pid`` does on SIGINT: 'ignored', 'caught' (a handler) or 'default'."""
    masks = dict(
        line.split(":\t")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":\t" in line
    )
    bit = 1 << (signal.SIGINT - 1)
    if int(masks["SigIgn"], 16) & bit:
        return "ignored"
    return "caught" if int(masks["SigCgt"], 16) & bit else "default"


def _refused(tmp_path: Path, recipe: str) -> str:
    """A plain hub on ``recipe`` that must refuse to start: its output, once it exited 1 without
    a traceback and without starting anything."""
    hub = _hub(_hub_file(tmp_path, secrets.token_hex(16), free_port(), recipe))
    output, _ = hub.communicate(timeout=120)
    hub.stdout.close()
    assert hub.returncode == 1, output
    assert "Traceback" not in output
    assert not (tmp_path / "hub.sqlite").exists()  # nothing started
    return output


def test_plain_jupyterhub_refuses_a_misspelt_setting_in_one_line(tmp_path: Path):
    recipe = _guide_recipe().replace("c.ScaleLabSpawner.store_url", "c.ScaleLabSpawner.store_ulr")
    assert "store_ulr" in recipe
    output = _refused(tmp_path, recipe)
    assert (
        "ScaleLab cannot start: the configuration is not valid: c.ScaleLabSpawner has unknown "
        "setting(s) ['store_ulr'] (did you mean 'store_ulr' -> 'store_url'?). Correct that "
        f"setting in {tmp_path / 'jupyterhub_config.py'}" in output
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is a root hub's (CI runs as root)")
def test_plain_jupyterhub_run_by_root_refuses_to_run_every_server_as_root(tmp_path: Path):
    homes = f"c.ScaleLabSpawner.home_root = {str(tmp_path / 'homes')!r}\n"
    recipe = _guide_recipe().replace("import scalelab", homes + "import scalelab")
    output = _refused(tmp_path, recipe)
    assert (
        "ScaleLab cannot start: the configuration is not valid: c.ScaleLabSpawner: every "
        "student's server would run as root (the hub runs as root, home_root is set and "
        "system_users is off): set c.ScaleLabSpawner.system_users = True for a system user per "
        "student, or c.ScaleLabSpawner.allow_root_servers = True to run them as root on purpose."
    ) in output


def test_plain_jupyterhub_with_the_guides_recipe_serves_scalelab(tmp_path: Path):
    """Started as a shell script's ``jupyterhub -f ... &`` (SIGINT ignored): its services still
    end on the SIGINT that JupyterHub stops them with (else each sat out its interrupt_timeout,
    10 s, at every hub stop)."""
    token, port = secrets.token_hex(16), free_port()
    hub = _hub(_hub_file(tmp_path, token, port, _guide_recipe()), sigint_ignored=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(hub.stdout), daemon=True)
    reader.start()
    auth = {"Authorization": f"token {token}"}
    try:
        deadline = time.monotonic() + 120
        # Both services have called the hub once (a service stopped while it still imports
        # would print a KeyboardInterrupt), and the hub has its route in the proxy.
        while not all(any(c in line for line in list(lines)) for c in CALLERS):
            assert hub.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "the services did not start:\n" + "".join(lines)
            time.sleep(0.5)
        board = requests.get(f"http://127.0.0.1:{port}/hub/api/scalelab/gpus", headers=auth)
        assert board.status_code == 200, board.text
        assert board.json()["gpus"] == [] and board.json()["queue"] == []
        url = f"http://127.0.0.1:{port}/hub/api/services"
        services = requests.get(url, headers=auth, timeout=5)
        assert {"scalelab-gpu-monitor", "scalelab-idle-culler"} <= set(services.json())
        children = psutil.Process(hub.pid).children()
        found = {
            name: [p.pid for p in children if module in " ".join(p.cmdline())]
            for name, module in (
                ("culler", "jupyterhub_idle_culler"),
                ("monitor", "scalelab.hub_ext.services.gpu_monitor"),
            )
        }
        assert _sigint(hub.pid) != "default"  # the hub itself: as JupyterHub and the shell set it
        assert {name: [_sigint(pid) for pid in pids] for name, pids in found.items()} == {
            "culler": ["caught"],  # Python's KeyboardInterrupt
            "monitor": ["caught"],
        }
    finally:
        hub.send_signal(signal.SIGTERM)
        hub.wait(timeout=120)
        reader.join(timeout=10)
        hub.stdout.close()
    output = "".join(lines)
    assert "no GPU: servers run CPU-only" in output  # the inventory at start (start_with_hub)
    calls = [line for line in lines if any(c in line for c in CALLERS)]
    assert calls and all(line.startswith("[D ") for line in calls), calls[:3]
    assert "Traceback" not in output, output
