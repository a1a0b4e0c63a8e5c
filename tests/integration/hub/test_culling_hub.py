"""GPU-aware culling through the real hub: jupyterhub-idle-culler and ScaleLab's GPU monitor
run as hub services, with a declared inventory of two fake GPUs whose utilisation the test sets
through the hub's GPU source (:class:`tests.support.fake_gpus.FileReadingsGPUs`, plugged in by
configuration): the readings take the path NVML's take, through the GPU board."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO
from tests.integration.hub.test_ops_hub import execute_when_ready
from tests.support import fake_gpus
from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, execute, running

IDLE_TIMEOUT_S = 60
GPU_IDLE_TIMEOUT_S = 30


@contextlib.contextmanager
def culling_hub(tmp_path: Path, **culling: int) -> Iterator[ScaleLabUp]:
    """A running ``scalelab up`` with two declared GPUs whose utilisation the test sets.

    ``culling`` are ``c.ScaleLabCulling`` settings (seconds); ``hub.utilization`` is the
    readings file of the hub's GPU source (``{uuid: percent}``), starting empty. The hub
    imports that source from this repository (``PYTHONPATH``).
    """
    utilization = tmp_path / "fake-utilization.json"
    utilization.write_text("{}")
    settings = {"poll_interval": 2, **culling}
    source = (
        f"c.ScaleLabSpawner.gpu_source_class = {fake_gpus.IMPORT_PATH!r}\n"
        f"c.FileReadingsGPUs.readings_file = {str(utilization)!r}\n"
    )
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    up = ScaleLabUp(
        tmp_path / "state",
        env={"PYTHONPATH": path},
        extra_config=TWO_FAKE_GPUS
        + source
        + "".join(f"c.ScaleLabCulling.{key} = {value!r}\n" for key, value in settings.items()),
    )
    up.utilization = utilization
    with running(up):
        yield up


@pytest.fixture
def hub(tmp_path: Path):
    with culling_hub(
        tmp_path,
        idle_timeout=IDLE_TIMEOUT_S,
        cull_every=5,
        gpu_idle_timeout=GPU_IDLE_TIMEOUT_S,
        gpu_idle_warning=GPU_IDLE_TIMEOUT_S - 10,
    ) as up:
        yield up


def _holder_gpu(hub: ScaleLabUp, user: str) -> str:
    board = hub.api("GET", "/scalelab/gpus").json()
    held = [g["uuid"] for g in board["gpus"] if g["holder"] and g["holder"]["user"] == user]
    assert len(held) == 1, board
    return held[0]


def _running(hub: ScaleLabUp, user: str) -> bool:
    return bool(hub.api("GET", f"/users/{user}").json()["servers"])


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting until {what}")


def _busy_in_background(hub: ScaleLabUp, user: str, kernel_id: str) -> threading.Thread:
    """Execute a long cell in a thread; its reply never comes before the hub stops."""

    def run() -> None:
        try:
            code = "import time; time.sleep(600)"
            asyncio.run(execute_when_ready(hub, user, kernel_id, code, timeout_s=600))
        except Exception:  # noqa: BLE001 -- the hub stopping ends the cell: expected
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.asyncio
async def test_idle_gpu_is_warned_then_stopped_while_busy_gpu_and_kernel_are_not_culled(hub):
    # alice trains: her GPU is busy
    hub.start_server("alice", {"profile": "gpu-1"})
    gpu_a = _holder_gpu(hub, "alice")
    hub.utilization.write_text(json.dumps({gpu_a: 90}))

    # bob leaves his GPU idle, with a notebook open and a file of his (GPU rule before culler)
    hub.start_server("bob", {"profile": "gpu-1"})
    gpu_b = _holder_gpu(hub, "bob")
    put = hub.server_api(
        "bob", "PUT", "/contents/keep.txt", json={"type": "file", "format": "text", "content": "x"}
    )
    assert put.status_code in (200, 201), put.text
    kernel_b = hub.server_api("bob", "POST", "/kernels", json={"name": "scalelab-pytorch"}).json()
    assert (await execute_when_ready(hub, "bob", kernel_b["id"], "1 + 1"))["result"] == "2"
    hub.utilization.write_text(json.dumps({gpu_a: 90, gpu_b: 0}))

    def notice():
        url = f"{hub.url}/user/bob/scalelab/api/notice"
        return requests.get(url, headers=hub.auth, timeout=30).json()

    _wait(lambda: notice() is not None, 60, "bob is warned")
    assert f"Your GPU(s) {gpu_b} have been idle" in notice()["message"]
    out = await execute(hub, "bob", kernel_b["id"], "print('after the warning')")
    assert f"ScaleLab: Your GPU(s) {gpu_b} have been idle" in out["stdout"]
    assert "your files are kept" in out["stdout"]

    # carol's CPU server is idle; dave's kernel executes with no browser open
    hub.start_server("carol", {"profile": "cpu"})
    hub.start_server("dave", {"profile": "cpu"})
    dave_started = time.monotonic()
    kernel_d = hub.server_api("dave", "POST", "/kernels", json={"name": "scalelab-pytorch"}).json()
    _busy_in_background(hub, "dave", kernel_d["id"])
    _wait(
        lambda: (
            hub.server_api("dave", "GET", f"/kernels/{kernel_d['id']}").json()["execution_state"]
            == "busy"
        ),
        120,
        "dave's kernel executes",
    )

    _wait(lambda: not _running(hub, "bob"), GPU_IDLE_TIMEOUT_S + 60, "bob's server is stopped")
    board = {g["uuid"]: g["holder"] for g in hub.api("GET", "/scalelab/gpus").json()["gpus"]}
    assert board[gpu_b] is None  # back in the pool
    assert board[gpu_a]["user"] == "alice"
    assert (hub.state_dir / "homes" / "bob" / "keep.txt").read_text() == "x"  # files kept
    log = (hub.state_dir / "logs" / "jupyterhub.log").read_text()
    assert f"stopping bob/ (files are kept): its GPU(s) {gpu_b} stayed at or under 5 %" in log
    assert "FAKE GPU utilisation from" in log

    _wait(lambda: not _running(hub, "carol"), IDLE_TIMEOUT_S + 90, "carol's idle server is culled")
    while time.monotonic() < dave_started + IDLE_TIMEOUT_S + 20:
        time.sleep(1)
    assert _running(hub, "dave"), "a server whose kernel executes was culled"
    assert _running(hub, "alice"), "a server whose GPU is busy was culled"
    assert _holder_gpu(hub, "alice") == gpu_a
