"""``scalelab.configure(c)``: the parts that need no running hub, kernel or cluster. The rest runs
for real in ``tests/integration/hub/test_configure.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from traitlets.config import Config

import scalelab
from scalelab.hub_ext.hub.config_check import ConfigProblem
from scalelab.templates import templates_dir

ROOT = Path(__file__).resolve().parents[2]


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
        r"/api/scalelab/users/([^/]+)/submissions",  # hand-in (issue 33)
        r"/api/scalelab/users/([^/]+)/submissions/([^/]+)",
        r"/api/scalelab/users/([^/]+)/submissions/([^/]+)/([^/]+)",  # one version's notebook
        r"/api/scalelab/submissions/([^/]+)",  # collection (instructors)
        r"/api/scalelab/users/([^/]+)/feedback/([^/]+)",  # feedback
        r"/scalelab/submissions",  # the instructors' view of the hand-ins
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
