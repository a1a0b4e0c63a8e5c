"""``scalelab up`` end to end: real JupyterHub, configurable-http-proxy, single-user server,
kernels and Spark; then Ctrl-C, and no process left behind."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest
import requests

from scalelab.kernels.specs import KERNEL_NAMES
from tests.support.hubproc import ScaleLabUp, execute

LABS = {
    "lab1_millionsong_regression.ipynb",
    "lab2_fashion_mnist_convnet.ipynb",
    "lab3_distributed_training.ipynb",
}


@pytest.fixture
def hub(tmp_path: Path):
    up = ScaleLabUp(tmp_path / "state", warm_spark=True)
    try:
        yield up
    finally:
        up.kill()


def warm_kernel(hub: ScaleLabUp, user: str, timeout_s: float = 240) -> dict:
    """The status of ``user``'s server's warm PySpark kernel once it is ready."""
    url = f"{hub.url}/user/{user}/scalelab/api/spark-warm"
    deadline = time.monotonic() + timeout_s
    while True:
        status = requests.get(url, headers=hub.auth, timeout=30).json()
        if status["state"] == "ready" or time.monotonic() > deadline:
            assert status["state"] == "ready", status
            return status
        time.sleep(0.5)


@pytest.mark.asyncio
async def test_up_serves_a_student_server_with_three_kernels_and_spark_then_stops_everything(
    hub: ScaleLabUp,
):
    hub.start()
    banner = "".join(hub.output)
    assert "scalelab data fetch fashion-mnist millionsong" in banner  # the new store is empty
    assert f"the password: {hub.password}" in banner
    assert f"State folder: {hub.state_dir} (new)" in banner
    server = hub.start_server("alice")
    assert server["url"] == "/user/alice/"

    specs = hub.server_api("alice", "GET", "/kernelspecs").json()["kernelspecs"]
    assert set(specs) == set(KERNEL_NAMES)
    assert {s["spec"]["display_name"] for s in specs.values()} == {
        "PySpark",
        "TensorFlow",
        "PyTorch",
    }

    home = hub.server_api("alice", "GET", "/contents").json()["content"]
    assert LABS <= {item["name"] for item in home}
    assert (hub.state_dir / "homes" / "alice" / "lab1_millionsong_regression.ipynb").is_file()

    other = hub.server_api("alice", "POST", "/kernels", json={"name": "python3"})
    assert other.status_code == 404  # only the course's kernels start, not only are listed
    assert "kernel python3 is not offered here" in other.json()["message"]
    warm = warm_kernel(hub, "alice")  # the server keeps a PySpark kernel started ahead
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pyspark"}).json()
    assert kernel["id"] == warm["kernel_id"]  # this request got it
    out = await execute(hub, "alice", kernel["id"], "spark.range(1000).count()")
    assert out["error"] is None, out
    assert out["result"] == "1000"

    # The course store: the hub's URL in every kernel, the same files through fsspec.
    out = await execute(
        hub,
        "alice",
        kernel["id"],
        "store.pipe_file('home/alice/probe.txt', b'written by PySpark'); print(STORE_URL)",
    )
    assert out["stdout"].strip() == (hub.state_dir / "store").as_uri()
    read_probe = (
        "import fsspec\n"
        "with fsspec.open(STORE_URL + '/home/alice/probe.txt') as f:\n"
        "    print(f.read().decode())"
    )
    for name in ("scalelab-tensorflow", "scalelab-pytorch"):
        other = hub.server_api("alice", "POST", "/kernels", json={"name": name}).json()
        out = await execute(hub, "alice", other["id"], read_probe)
        assert out["error"] is None, out
        # The first cell's output starts with the kernel's banner (normal output).
        assert out["stdout"].strip().splitlines()[-1] == "written by PySpark"

    running = hub.descendants()
    names = {p.name() for p in running}
    assert "java" in names, names  # the PySpark kernel's Spark driver JVM
    assert any("configurable-http-proxy" in " ".join(p.cmdline()) for p in running)

    assert hub.interrupt() == 0
    _, alive = psutil.wait_procs(running, timeout=30)
    assert alive == [], [(p.pid, p.cmdline()) for p in alive]
    assert "Stopping ScaleLab" in "".join(hub.output)


def test_second_up_on_the_same_state_folder_says_who_runs(hub: ScaleLabUp):
    hub.start()
    second = ScaleLabUp(hub.state_dir)  # same state folder, another port
    result = subprocess.run(second.argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ScaleLab is already running" in result.stderr
    assert f"pid {hub.proc.pid}" in result.stderr
    assert "Traceback" not in result.stderr
    assert hub.interrupt() == 0


def test_a_misspelt_gpu_setting_stops_scalelab_up_and_names_it(tmp_path: Path):
    up = ScaleLabUp(tmp_path / "state", extra_config="c.GPUPolicy.max_gpus_per_usr = 2\n")
    result = subprocess.run(up.argv, env=up.env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 2  # refused up front, with the hub's own validation
    assert "The hub did not start" not in result.stdout and "Traceback" not in result.stderr
    assert result.stderr.startswith(
        "scalelab: error: the configuration is not valid: "
        "c.GPUPolicy has unknown setting(s) ['max_gpus_per_usr']"
    )
    assert len(result.stderr.splitlines()) == 1
