"""``scalelab.configure(c)``: the one way ScaleLab goes into a hub configuration.

Pure tests of what it adds (once, however often it is called), and two real hubs started by plain
``jupyterhub -f`` from an operator's own file, as the operators' guide gives it: one refuses a
misspelt setting in one log line, the other serves ScaleLab's pages and services.
"""

from __future__ import annotations

import importlib
import json
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from traitlets.config import Config

import scalelab
from scalelab.commands.up import find_proxy, free_port
from scalelab.hub_ext.hub.config_check import ConfigProblem
from scalelab.templates import templates_dir

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "operators-guide.md"


def _services(c: Config) -> list[str]:
    return [s["name"] for s in c.JupyterHub.services]


def test_configure_installs_spawner_pages_services_once():
    c = Config()
    c.JupyterHub.template_paths = ["/srv/my-templates"]
    c.JupyterHub.services = [{"name": "mine", "command": ["true"]}]
    assert scalelab.configure(c) is c
    scalelab.configure(c)  # twice: nothing doubles
    assert c.JupyterHub.spawner_class == "scalelab"
    assert c.JupyterHub.template_paths == ["/srv/my-templates", str(templates_dir())]
    routes = [route for route, _handler in c.JupyterHub.extra_handlers]
    assert routes == [
        r"/api/scalelab/gpus",
        r"/scalelab/gpus",
        r"/api/scalelab/users/([^/]+)/gpu-readings",  # the servers' GPU reports
        r"/api/scalelab/users/([^/]+)/spark-gpus",  # cluster Spark applications' GPUs
        *[r for r in routes if "logs" in r or "logfiles" in r],
    ]
    assert len(routes) == len(set(routes)) and any("logs" in r for r in routes)
    assert _services(c) == ["mine", "scalelab-gpu-monitor", "scalelab-idle-culler"]
    assert [r["name"] for r in c.JupyterHub.load_roles] == [
        "scalelab-gpu-monitor",
        "scalelab-idle-culler",
    ]


def test_configure_keeps_the_operators_spawner_class():
    c = Config()
    c.JupyterHub.spawner_class = "scalelab.spawner.local.ScaleLabSpawner"
    scalelab.configure(c)
    assert c.JupyterHub.spawner_class == "scalelab.spawner.local.ScaleLabSpawner"


@pytest.mark.parametrize(
    ("section", "key", "message"),
    [
        (
            "ScaleLabSpawner",
            "store_ulr",
            "c.ScaleLabSpawner has unknown setting(s) ['store_ulr'] "
            "(did you mean 'store_ulr' -> 'store_url'?)",
        ),
        (
            "LivySettings",
            "urll",
            "c.LivySettings has unknown setting(s) ['urll'] (did you mean 'urll' -> 'url'?)",
        ),
        (
            "GPUPolicy",
            "max_gpus_per_usr",
            "c.GPUPolicy has unknown setting(s) ['max_gpus_per_usr'] "
            "(did you mean 'max_gpus_per_usr' -> 'max_gpus_per_user'?)",
        ),
    ],
)
def test_configure_refuses_misspelt_settings_with_the_nearest_name(section, key, message):
    c = Config()
    c[section][key] = 1
    with pytest.raises(ConfigProblem) as info:
        scalelab.configure(c)
    assert str(info.value) == f"the configuration is not valid: {message}"
    assert "scalelab config-reference" in info.value.fix


def test_an_unloadable_spawner_class_is_named():
    c = Config()
    c.JupyterHub.spawner_class = "no_such_module.Spawner"
    with pytest.raises(ConfigProblem, match=r"c.JupyterHub.spawner_class = 'no_such_module"):
        scalelab.configure(c)


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
        f"c.JupyterHub.services = [{{'name': 'tests', 'api_token': {token!r}}}]\n"
        "c.JupyterHub.load_roles = [{'name': 'admin', 'services': ['tests']}]\n" + recipe
    )
    return config


def _hub(config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(config)],
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.integration
def test_plain_jupyterhub_refuses_a_misspelt_setting_in_one_line(tmp_path: Path):
    recipe = _guide_recipe().replace("c.ScaleLabSpawner.store_url", "c.ScaleLabSpawner.store_ulr")
    assert "store_ulr" in recipe
    hub = _hub(_hub_file(tmp_path, secrets.token_hex(16), free_port(), recipe))
    output, _ = hub.communicate(timeout=120)
    hub.stdout.close()
    assert hub.returncode == 1, output
    assert (
        "ScaleLab cannot start: the configuration is not valid: c.ScaleLabSpawner has unknown "
        "setting(s) ['store_ulr'] (did you mean 'store_ulr' -> 'store_url'?). Correct that "
        f"setting in {tmp_path / 'jupyterhub_config.py'}" in output
    )
    assert "Traceback" not in output
    assert not (tmp_path / "hub.sqlite").exists()  # nothing started


@pytest.mark.integration
def test_plain_jupyterhub_with_the_guides_recipe_serves_scalelab(tmp_path: Path):
    token, port = secrets.token_hex(16), free_port()
    hub = _hub(_hub_file(tmp_path, token, port, _guide_recipe()))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(hub.stdout), daemon=True)
    reader.start()
    auth = {"Authorization": f"token {token}"}
    try:
        deadline = time.monotonic() + 120
        # Both services have called the hub once (a service stopped while it still imports
        # would print a KeyboardInterrupt), and the hub has its route in the proxy.
        callers = ("(scalelab-gpu-monitor@", "(scalelab-idle-culler@")
        while not all(any(c in line for line in list(lines)) for c in callers):
            assert hub.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "the services did not start:\n" + "".join(lines)
            time.sleep(0.5)
        board = requests.get(f"http://127.0.0.1:{port}/hub/api/scalelab/gpus", headers=auth)
        assert board.status_code == 200, board.text
        assert board.json()["gpus"] == [] and board.json()["queue"] == []
        url = f"http://127.0.0.1:{port}/hub/api/services"
        services = requests.get(url, headers=auth, timeout=5)
        assert {"scalelab-gpu-monitor", "scalelab-idle-culler"} <= set(services.json())
    finally:
        hub.send_signal(signal.SIGTERM)
        hub.wait(timeout=120)
        reader.join(timeout=10)
        hub.stdout.close()
    output = "".join(lines)
    assert "no GPU: servers run CPU-only" in output  # the inventory at start (start_with_hub)
    assert "Traceback" not in output, output


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("scalelab.hub_ext.serverext", "scalelab.hub_ext.server.extension"),
        ("scalelab.hub_ext.gpu_board", "scalelab.hub_ext.hub.gpu_board"),
    ],
)
def test_old_module_paths_still_work_for_one_release_with_a_warning(old: str, new: str):
    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=rf"{old} is deprecated"):
        module = importlib.import_module(old)
    moved = importlib.import_module(new)
    if old.endswith("serverext"):  # an old jupyter_server_config.d file loads the new module
        assert module._jupyter_server_extension_points() == [{"module": new}]
        assert module._load_jupyter_server_extension is moved._load_jupyter_server_extension
    else:
        assert module.handlers is moved.handlers


def test_the_installed_server_config_enables_the_extension_by_its_new_path():
    enabled = json.loads((ROOT / "hub_ext" / "jupyter-config" / "scalelab.json").read_text())
    extensions = enabled["ServerApp"]["jpserver_extensions"]
    assert extensions == {"scalelab.hub_ext.server.extension": True}


def test_a_spawner_without_the_course_layer_is_still_checked_for_scalelab_sections():
    c = Config()
    c.JupyterHub.spawner_class = "simple"  # a benchmark's baseline: JupyterHub's own spawner
    scalelab.configure(c)
    c.GPUPolicy.max_gpus_per_usr = 1
    with pytest.raises(ConfigProblem, match=r"c.GPUPolicy has unknown setting\(s\)"):
        scalelab.configure(c)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "spark_driver_memory",
            5,
            "The 'spark_driver_memory' trait of a ScaleLabSpawner instance expected a unicode "
            "string, not the int 5.",
        ),
        (
            "gpu_queue_timeout",
            "x",
            "The 'gpu_queue_timeout' trait of a ScaleLabSpawner instance expected a float, not "
            "the str 'x'.",
        ),
        (
            "spark_driver_memory",
            "lots",
            "c.ScaleLabSpawner.spark_driver_memory must be a JVM size like '512m' or '2g', "
            "not 'lots'",
        ),
    ],
)
def test_a_spawner_value_of_the_wrong_kind_is_refused_up_front(key, value, message):
    c = Config()
    c.ScaleLabSpawner[key] = value
    with pytest.raises(ConfigProblem) as info:
        scalelab.configure(c)
    assert str(info.value) == f"the configuration is not valid: {message}"
