"""Abandoned GPU requests and the allocator at hub start, with the real hub.

GPUs are a declared inventory of two fakes (this machine has none; the hub log names them
DECLARED). A queued spawn whose pending page nobody watches for ``gpu_abandon_timeout`` seconds
is withdrawn and the student is told why on the next visit; one whose page stays open keeps
its place. The inventory line is in the hub log when the hub starts, before any spawn.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.integration.hub.test_gpu_hub import _gpus, _start, _wait_ready
from tests.support.hubproc import (
    TWO_FAKE_GPUS,
    PlainHub,
    ScaleLabUp,
    get_as,
    progress_events,
    running,
)

ABANDON_S = 15  # longer than the 10 s a REST POST waits for a slow spawn


@pytest.fixture
def hub(tmp_path: Path):
    up = ScaleLabUp(
        tmp_path / "state",
        extra_config=TWO_FAKE_GPUS
        + f"c.ScaleLabSpawner.gpu_abandon_timeout = {ABANDON_S}\n"
        + "c.ScaleLabSpawner.poll_interval = 2\n",
    )
    with running(up):
        yield up


def _until(check, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert check()


def _queue(hub: ScaleLabUp) -> list[str]:
    return [q["user"] for q in hub.api("GET", "/scalelab/gpus").json()["queue"]]


def test_an_abandoned_request_is_withdrawn_and_a_watched_one_keeps_its_place(hub: ScaleLabUp):
    log = hub.state_dir / "logs" / "jupyterhub.log"
    _until(lambda: "ScaleLab GPU inventory: 2 GPU(s) DECLARED" in log.read_text())
    assert "asks for" not in log.read_text()  # built at hub start, before any spawn

    for user in ("alice", "bob"):
        assert _start(hub, user, {"profile": "gpu-1"}).status_code in (201, 202)
        _wait_ready(hub, user)
    # carol queues, watches her pending page for a moment, then closes the tab
    assert _start(hub, "carol", {"profile": "gpu-1"}).status_code == 202
    progress_events(hub, "carol", lambda e: "scalelab_queue" in e)
    # dave queues behind her and keeps his pending page open
    assert _start(hub, "dave", {"profile": "gpu-1"}).status_code == 202
    dave_events: list[dict] = []
    watcher = threading.Thread(
        target=lambda: dave_events.extend(
            progress_events(hub, "dave", lambda e: e.get("ready") or e.get("failed"), 600)
        ),
        daemon=True,
    )
    watcher.start()

    _until(lambda: hub.api("GET", "/users/carol").json()["servers"] == {}, 60)
    assert (
        f"carol/ withdrawn from the GPU queue: nobody watched its pending page for {ABANDON_S}"
        in (log.read_text())
    )
    assert _queue(hub) == ["dave"]  # dave, watched all along, kept his place
    page = get_as(hub, "carol", hub.password, "/hub/spawn-pending/carol")
    assert "Your request for 1 GPU(s) was withdrawn from the queue" in page.text
    assert "Start your server again to queue anew" in page.text

    alice_gpu = _gpus(hub, "alice")
    assert hub.api("DELETE", "/users/alice/server").status_code in (202, 204)
    _wait_ready(hub, "dave")
    watcher.join(timeout=120)
    assert dave_events and dave_events[-1].get("ready")
    assert _gpus(hub, "dave") == alice_gpu  # carol's withdrawn request took nothing
    assert hub.api("GET", "/users/carol").json()["servers"] == {}
    # carol may start again at once
    assert _start(hub, "carol", {"profile": "cpu"}).status_code in (201, 202)
    _wait_ready(hub, "carol")
    assert _gpus(hub, "carol") == ""


def test_a_hub_without_nvml_says_so_once_at_start(tmp_path: Path):
    hub = PlainHub(tmp_path / "state")  # no declared GPUs, and no NVIDIA driver here
    try:
        hub.start()
        log = tmp_path / "state" / "hub.log"
        line = "ScaleLab GPU inventory: no GPU: servers run CPU-only (NVML unavailable"
        _until(lambda: line in log.read_text(), 60)
        hub.start_server("alice", {"profile": "cpu"})
        assert hub.api("GET", "/scalelab/gpus").json()["gpus"] == []
        assert log.read_text().count("ScaleLab GPU inventory") == 1
        hub.api("DELETE", "/users/alice/server")
    finally:
        hub.close()
