"""The spawner's pure parts, its configuration, the course layer over another backend, and NVML
discovery on this (GPU-less) machine."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from jupyterhub.objects import Hub
from jupyterhub.spawner import LocalProcessSpawner, Spawner, SpawnException
from traitlets.config import Config

from scalelab.common.gpu_inventory import discover_nvml
from scalelab.kernels.spark_defaults import (
    DEFAULT_DRIVER_MEMORY,
    DEFAULT_DRIVER_MEMORY_CHOICES,
    DEFAULT_SPARK_MASTER,
)
from scalelab.spawner import CourseSpawnerMixin, ScaleLabSpawner
from scalelab.spawner.environment import server_args, server_environment
from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.gpu_spawner import GPUSpawnerMixin
from scalelab.spawner.local import ipc_sockets_fit, runtime_folder_prefix


def test_registered_under_the_jupyterhub_spawners_entry_point():
    (ep,) = [e for e in entry_points(group="jupyterhub.spawners") if e.name == "scalelab"]
    assert ep.load() is ScaleLabSpawner


def test_server_environment_keeps_one_name_per_setting():
    env = server_environment(
        store_url="hdfs://nn:8020/course",
        store_options={"user": "alice"},
        spark_master="local[*]",
        spark_driver_memory="2g",
        jupyter_path=["/state/share/jupyter"],
        inherited_jupyter_path="/usr/share/jupyter",
    )
    assert env["SCALELAB_STORE_URL"] == "hdfs://nn:8020/course"
    assert json.loads(env["SCALELAB_STORE_OPTIONS"]) == {"user": "alice"}
    assert env["SCALELAB_SPARK_MASTER"] == "local[*]"
    assert env["SCALELAB_SPARK_DRIVER_MEMORY"] == "2g"
    assert env["JUPYTER_PATH"] == "/state/share/jupyter:/usr/share/jupyter"


def test_cpu_only_server_sees_no_gpu_and_gpu_server_sees_uuids():
    base = dict(
        store_url="file:///s", store_options={}, spark_master="local[*]", spark_driver_memory="1g"
    )
    assert server_environment(**base)["CUDA_VISIBLE_DEVICES"] == ""
    env = server_environment(**base, gpu_uuids=["GPU-1", "GPU-2"])
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-1,GPU-2"
    assert env["SCALELAB_GPUS"] == "GPU-1,GPU-2"


def test_server_args_allow_exactly_scalelab_kernels():
    args = server_args()
    assert [a for a in args if "allowed_kernelspecs" in a] == [
        "--KernelSpecManager.allowed_kernelspecs=scalelab-pyspark",
        "--KernelSpecManager.allowed_kernelspecs=scalelab-tensorflow",
        "--KernelSpecManager.allowed_kernelspecs=scalelab-pytorch",
    ]
    assert "--MappingKernelManager.default_kernel_name=scalelab-pyspark" in args
    assert not [a for a in args if "cull" in a]  # no timeout: no culling
    # ScaleLab's kernel manager (a PySpark kernel started ahead; culling, when set) always
    manager = "--ServerApp.kernel_manager_class=scalelab.hub_ext.server.warm_kernel."
    assert [a for a in args if "kernel_manager_class" in a] == [f"{manager}WarmKernelManager"]


def test_idle_pyspark_kernels_are_culled_by_scalelabs_kernel_manager_within_a_minute():
    culling = server_args(spark_kernel_idle_timeout=3600)[len(server_args()) :]
    assert culling == [
        "--ScaleLabKernelManager.cull_idle_timeout=3600",
        "--ScaleLabKernelManager.cull_interval=60",  # looked at every minute
        "--ScaleLabKernelManager.cull_connected=True",  # an open tab holds no executors
    ]
    assert "--ScaleLabKernelManager.cull_interval=1" in server_args(spark_kernel_idle_timeout=3)


def test_nvml_without_a_gpu_gives_an_empty_inventory_with_the_reason():
    # This machine has no NVIDIA driver: the real NVML call fails, and that is not an error.
    inventory = discover_nvml()
    assert inventory.gpus == ()
    assert inventory.source == "none"
    assert "NVML" in inventory.reason


def _spawner(tmp_path: Path, name: str) -> ScaleLabSpawner:
    c = Config()
    c.ScaleLabSpawner.home_root = str(tmp_path / "homes")
    c.ScaleLabSpawner.store_url = "file:///srv/course"
    return ScaleLabSpawner(config=c, user=SimpleNamespace(name=name, url=f"/user/{name}/"))


def test_homes_live_under_home_root_and_servers_run_scalelab_python(tmp_path: Path):
    spawner = _spawner(tmp_path, "alice")
    assert spawner.home_dir == str((tmp_path / "homes" / "alice").resolve())
    assert spawner.cmd[1:] == ["-m", "jupyterhub.singleuser"]
    assert spawner.default_url == "/lab"


@pytest.mark.parametrize("name", ["..", "."])
def test_a_user_name_cannot_escape_home_root(tmp_path: Path, name: str):
    with pytest.raises(ValueError, match="does not make a home"):
        _ = _spawner(tmp_path, name).home_dir


def test_store_url_is_required(tmp_path: Path):
    spawner = ScaleLabSpawner(user=SimpleNamespace(name="alice", url="/user/alice/"))
    with pytest.raises(ValueError, match=r"c\.ScaleLabSpawner\.store_url is not set"):
        spawner.get_env()


# -- the course layer, over any backend ----------------------------------------------------------

#: Every setting c.ScaleLabSpawner took before the course layer was split off, with a value.
SETTINGS_BEFORE_THE_COURSE_LAYER = {
    "home_root": "/srv/homes",
    "store_url": "hdfs://nn:8020/course",
    "store_options": {"user": "alice"},
    "spark_master": "spark://master:7077",
    "spark_driver_memory": "2g",
    "spark_driver_memory_choices": ["2g", "8g"],
    "kernelspec_path": ["/state/share/jupyter"],
    "profiles": [{"slug": "cpu"}],
    "declared_gpus": [{"uuid": "GPU-test-0"}],
    "exclude_gpus": ["0"],
    "gpu_queue_timeout": 60.0,
    "fair_share_s_per_gpu_hour": 0.0,
    "gpu_queue_file": "",
    "gpu_abandon_timeout": 30.0,
    "options_template_paths": ["/srv/templates"],
    "server_log_dir": "/srv/logs",
}


class _Backend(Spawner):
    """A spawner backend that is not LocalProcessSpawner (stands in for KubeSpawner)."""

    async def start(self):
        return ("127.0.0.1", 8888)

    async def stop(self, now=False):
        return None

    async def poll(self):
        return None


class CourseOnOtherBackend(CourseSpawnerMixin, _Backend):
    """What an operator writes for another JupyterHub spawner."""


def test_scalelab_spawner_is_the_course_layer_over_local_processes():
    assert ScaleLabSpawner.__mro__[1:3] == (CourseSpawnerMixin, GPUSpawnerMixin)
    assert issubclass(ScaleLabSpawner, LocalProcessSpawner)
    # local-process concerns stay out of the course layer
    for name in ("home_root", "server_log_dir"):
        assert name not in CourseSpawnerMixin.class_trait_names()


def test_every_existing_setting_is_still_set_as_c_scalelabspawner():
    c = Config()
    for name, value in SETTINGS_BEFORE_THE_COURSE_LAYER.items():
        setattr(c.ScaleLabSpawner, name, value)
    spawner = ScaleLabSpawner(config=c)
    for name, value in SETTINGS_BEFORE_THE_COURSE_LAYER.items():
        assert getattr(spawner, name) == value, name


def test_course_defaults_come_from_the_spark_defaults():
    spawner = ScaleLabSpawner()
    assert spawner.spark_master == DEFAULT_SPARK_MASTER
    assert spawner.spark_driver_memory == DEFAULT_DRIVER_MEMORY
    assert spawner.spark_driver_memory_choices == list(DEFAULT_DRIVER_MEMORY_CHOICES)
    assert spawner.spark_memory_offer() == (list(DEFAULT_DRIVER_MEMORY_CHOICES), "1g")


def test_memory_default_is_the_configured_size_when_offered_else_the_first_choice():
    c = Config()
    c.ScaleLabSpawner.spark_driver_memory_choices = ["1g", "4g"]
    c.ScaleLabSpawner.spark_driver_memory = "4g"
    assert ScaleLabSpawner(config=c).spark_memory_offer() == (["1g", "4g"], "4g")
    c.ScaleLabSpawner.spark_driver_memory = "3g"
    assert ScaleLabSpawner(config=c).spark_memory_offer() == (["1g", "4g"], "1g")


def test_another_backend_with_the_course_layer_starts_a_course_server():
    c = Config()
    c.CourseOnOtherBackend.store_url = "s3://bucket/course"
    c.CourseOnOtherBackend.store_options = {"endpoint_url": "http://127.0.0.1:8333"}
    c.CourseOnOtherBackend.spark_master = "k8s://https://kubernetes:443"
    c.CourseOnOtherBackend.kernelspec_path = ["/opt/scalelab/share/jupyter"]
    spawner = CourseOnOtherBackend(
        config=c, hub=Hub(), user=SimpleNamespace(name="alice", url="/user/alice/")
    )
    env = spawner.get_env()
    assert env["SCALELAB_STORE_URL"] == "s3://bucket/course"
    assert json.loads(env["SCALELAB_STORE_OPTIONS"]) == {"endpoint_url": "http://127.0.0.1:8333"}
    assert env["SCALELAB_SPARK_MASTER"] == "k8s://https://kubernetes:443"
    assert env["SCALELAB_SPARK_DRIVER_MEMORY"] == "1g"
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # no GPU granted: none visible
    assert env["JUPYTER_PATH"].split(os.pathsep)[0] == "/opt/scalelab/share/jupyter"
    assert "SCALELAB_LOG_DIR" not in env  # a local-process concern
    ours = server_args(spark_kernel_idle_timeout=3600)  # idle PySpark kernels: an hour
    args = spawner.get_args()
    assert args[-len(ours) - 2 : -2] == ours
    assert args[-1] == "--KernelManager.transport=ipc"  # kernels on Unix sockets, any backend
    # no network of its own known: jupyter-server-proxy's generic route off
    assert "--ServerApp.jpserver_extensions=jupyter_server_proxy=False" in args
    assert spawner.default_url == "/lab"


def test_the_store_url_error_names_the_spawner_class_in_use():
    spawner = CourseOnOtherBackend(hub=Hub(), user=SimpleNamespace(name="a", url="/user/a/"))
    with pytest.raises(ValueError, match=r"c\.CourseOnOtherBackend\.store_url is not set"):
        spawner.get_env()


def test_a_resumed_server_whose_process_is_a_zombie_is_dead(tmp_path: Path, monkeypatch):
    """A server started before a hub restart is not the hub's child; where its new parent
    never reaps it (PID 1 in a container without an init), it ends as a zombie, which
    ``kill(pid, 0)`` still finds. JupyterHub's poll must still call it dead (status 0)."""
    for name, value in (("_current", None), ("_building", None), ("_restores", [])):
        monkeypatch.setattr(GPUPool, name, value)  # a pool of this test's own
    running = subprocess.Popen(["sleep", "60"])
    ended = subprocess.Popen(["true"])  # never waited for here: a zombie once it exits
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(ended.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.05)
        for proc, expected in ((running, None), (ended, 0)):
            spawner = _spawner(tmp_path, "alice")
            spawner.gpu_queue_file = str(tmp_path / "gpu-queue.json")
            spawner.load_state({"pid": proc.pid})  # resumed: no Popen handle, only the pid
            assert asyncio.run(spawner.poll()) == expected
    finally:
        running.kill()
        running.wait()
        ended.wait()


@pytest.mark.parametrize("name", ["alice", "firstname.lastname@university.example.org", "ü" * 40])
def test_a_servers_temporary_folder_keeps_socket_paths_within_linuxs_limit(name: str):
    prefix = runtime_folder_prefix(name)
    assert prefix.startswith("scalelab-runtime-") and "/" not in prefix
    # /tmp/<prefix><8 random>/tmp/ + a socket folder of Python's multiprocessing, and socket
    longest = f"/tmp/{prefix}{'x' * 8}/tmp/pymp-{'x' * 8}/listener-{'x' * 8}"
    assert len(longest) <= 107, longest
    assert runtime_folder_prefix("alice") == "scalelab-runtime-alice-"


@pytest.mark.parametrize("name", ["alice", "firstname.lastname@university.example.org", "ü" * 40])
def test_kernels_ipc_sockets_fit_in_a_default_runtime_folder(name: str):
    folder = f"/tmp/{runtime_folder_prefix(name)}{'x' * 8}"  # mkdtemp's 8 random characters
    socket = f"{folder}/kernel-{'0' * 8}-{'0' * 4}-{'0' * 4}-{'0' * 4}-{'0' * 12}-ipc-99999"
    assert ipc_sockets_fit(folder) and len(socket) <= 107, socket
    assert not ipc_sockets_fit("/var/lib/a-course-hub-with-a-long-state-folder/runtime/" + folder)


def test_kernels_talk_to_their_server_over_unix_sockets_unless_ops_say_tcp(tmp_path: Path):
    spawner = _spawner(tmp_path, "alice")
    assert "--KernelManager.transport=ipc" in spawner.get_args()
    spawner.kernel_transport = "TCP"
    assert "--KernelManager.transport=tcp" in spawner.get_args()


def test_the_generic_proxy_route_is_off_for_a_server_outside_its_sandbox(tmp_path: Path):
    """jupyter-server-proxy's ``proxy/<port>`` would carry the student's cookies to any port of
    a loopback other students share; in a sandbox, the loopback is the server's own."""
    off = "--ServerApp.jpserver_extensions=jupyter_server_proxy=False"
    spawner = _spawner(tmp_path, "alice")
    assert spawner.sandbox_link is None and off in spawner.get_args()
    spawner.sandbox_link = object()  # what make_sandbox sets (a netns.SandboxLink)
    assert off not in spawner.get_args()


def test_a_runtime_folder_too_long_for_ipc_sockets_is_refused_with_both_ways_out(tmp_path: Path):
    spawner = _spawner(tmp_path, "alice")
    spawner.runtime_dir = "/srv/" + "r" * 60 + "/scalelab-runtime-alice-x1y2z3w4"
    with pytest.raises(SpawnException) as caught:
        spawner._check_ipc_room()
    message = str(caught.value)
    assert "would be longer than Linux's 107 characters" in message
    assert "c.ScaleLabSpawner.runtime_parent" in message
    assert "c.ScaleLabSpawner.kernel_transport = 'tcp'" in message
    spawner.kernel_transport = "tcp"
    spawner._check_ipc_room()  # TCP ports have no path to fit
