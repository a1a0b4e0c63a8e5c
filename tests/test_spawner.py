"""The spawner's pure parts, its configuration, and NVML discovery on this (GPU-less) machine."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from scalelab.spawner import ScaleLabSpawner
from scalelab.spawner.environment import server_args, server_environment
from scalelab.spawner.inventory import discover_nvml


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
