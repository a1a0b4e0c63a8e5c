"""GPUs through the real hub, with a declared inventory of two fake GPUs (this machine has none;
the inventory is named DECLARED in the hub log). Servers are real local processes; what a
server was given is read from its environment through /proc, and from its spawner state."""

from __future__ import annotations

import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.support.hubproc import (
    TWO_FAKE_GPUS,
    ScaleLabUp,
    execute,
    get_as,
    progress_events,
    running,
    server_environ,
    server_process,
)
from tests.unit.test_monitoring import metric_names, served

FAKE = ("GPU-fake-0000", "GPU-fake-0001")
OPS_PASSWORD = "ops-" + "x" * 40  # an admin of the hub, for the GPU board page
#: JupyterHub's start_timeout on the queue's hub: a queued spawn must outlive it. Every other
#: spawn there must beat it on a busy CI host too (one took over 15 s once), hence not less.
START_TIMEOUT_S = 30


def _gpu_hub(tmp_path: Path, extra: str = ""):
    return ScaleLabUp(
        tmp_path / "state",
        extra_config=TWO_FAKE_GPUS
        + "c.GPUPolicy.max_gpus_per_user = 1\n"
        + "c.ScaleLabSpawner.poll_interval = 2\n"  # notice dead servers within seconds
        + "c.Authenticator.admin_users = {'ops'}\n"
        + f"c.SharedPasswordAuthenticator.admin_password = {OPS_PASSWORD!r}\n"
        + extra,
    )


@pytest.fixture
def hub(tmp_path: Path):
    """The GPU hub with JupyterHub's own start_timeout."""
    with running(_gpu_hub(tmp_path)) as up:
        yield up


@pytest.fixture
def queue_hub(tmp_path: Path):
    """The GPU hub with a start_timeout short enough to be outwaited in the queue, and one
    server starting at a time (the line of starts, ``concurrent_starts``)."""
    extra = (
        f"c.Spawner.start_timeout = {START_TIMEOUT_S}\nc.ScaleLabSpawner.concurrent_starts = 1\n"
    )
    with running(_gpu_hub(tmp_path, extra)) as up:
        yield up


def _start(hub: ScaleLabUp, user: str, options: dict | None):
    if hub.api("GET", f"/users/{user}").status_code == 404:
        assert hub.api("POST", f"/users/{user}").status_code == 201
    body = None if options is None else {"user_options": options}
    return hub.api("POST", f"/users/{user}/server", json=body)


def _progress_until_ready(hub: ScaleLabUp, user: str) -> list[dict]:
    """``user``'s progress events from their spawn's start (waited for) until it is ready."""
    deadline = time.monotonic() + 60
    while not hub.api("GET", f"/users/{user}").json().get("servers", {}).get(""):  # not yet: 404
        assert time.monotonic() < deadline, f"{user}'s spawn never began"
        time.sleep(0.1)
    return progress_events(hub, user, lambda e: e.get("ready"), timeout_s=120)


def _wait_ready(hub: ScaleLabUp, user: str, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        server = hub.api("GET", f"/users/{user}").json()["servers"].get("")
        if server and server["ready"]:
            return server
        time.sleep(0.5)
    raise AssertionError(f"{user}'s server never got ready")


def _gpus(hub: ScaleLabUp, user: str) -> str:
    return server_environ(hub, user)["CUDA_VISIBLE_DEVICES"]


def test_exclusive_gpus_queue_with_visible_position_and_cancel(queue_hub: ScaleLabUp):
    hub = queue_hub
    log = hub.state_dir / "logs" / "jupyterhub.log"
    for user in ("alice", "bob"):
        assert _start(hub, user, {"profile": "gpu-1"}).status_code in (201, 202)
        server = _wait_ready(hub, user)
        assert server["state"]["scalelab"]["gpus"] == [_gpus(hub, user)]
    assert {_gpus(hub, "alice"), _gpus(hub, "bob")} == set(FAKE)  # never the same GPU
    assert server_environ(hub, "alice")["NVIDIA_VISIBLE_DEVICES"] == _gpus(hub, "alice")
    assert "2 GPU(s) DECLARED in the configuration" in log.read_text()

    # carol waits: position 1 of 1 on the pending page's progress events
    carol_asked = time.monotonic()
    assert _start(hub, "carol", {"profile": "gpu-1"}).status_code == 202
    events = progress_events(hub, "carol", lambda e: "scalelab_queue" in e)
    assert events[-1]["scalelab_queue"]["position"] == 1
    assert "you are number 1 of 1 in the queue" in events[-1]["message"]

    # ops see who holds what, and the queue: REST, page and Prometheus series
    board = hub.api("GET", "/scalelab/gpus").json()
    assert board["source"] == "declared"
    assert {g["holder"]["user"] for g in board["gpus"]} == {"alice", "bob"}
    assert [(q["position"], q["user"], q["gpus"]) for q in board["queue"]] == [(1, "carol", 1)]
    page = get_as(hub, "ops", OPS_PASSWORD, "/hub/scalelab/gpus")
    assert page.status_code == 200
    assert "carol/" in page.text and "GPU-fake-0001" in page.text and "declared" in page.text
    student_page = get_as(hub, "carol", hub.password, "/hub/scalelab/gpus")
    assert student_page.status_code == 403
    metrics = hub.api("GET", "/../metrics").text
    for series in (
        "scalelab_gpus_total 2.0",
        "scalelab_gpus_allocated 2.0",
        "scalelab_gpu_queue_length 1.0",
        'scalelab_store_reachable{protocol="file"} 1.0',
    ):
        assert series in metrics
    # every series the shipped alert rules and Grafana dashboard read is served (YARN's only
    # where Spark runs on YARN), and each running server's memory is there
    wanted = metric_names() - {"scalelab_yarn_reachable"}
    assert sorted(n for n in wanted if not served(n, metrics)) == []
    memory = re.search(
        r'^scalelab_server_memory_bytes\{server="",user="alice"\} (\S+)$', metrics, re.M
    )
    assert memory and float(memory[1]) > 20 * 2**20  # a Jupyter server's tree: tens of MiB
    student = hub.api("POST", "/users/carol/tokens", json={"expires_in": 600}).json()["token"]
    denied = requests.get(
        f"{hub.url}/hub/api/scalelab/gpus",
        headers={"Authorization": f"token {student}"},
        timeout=30,
    )
    assert denied.status_code == 403

    # dave waits behind carol, then cancels, and is free to start CPU-only at once
    assert _start(hub, "dave", {"profile": "gpu-1"}).status_code == 202
    events = progress_events(hub, "dave", lambda e: "scalelab_queue" in e)
    assert events[-1]["scalelab_queue"]["position"] == 2
    assert hub.api("DELETE", "/users/dave/server").status_code in (202, 204)
    deadline = time.monotonic() + 30
    while hub.api("GET", "/users/dave").json()["servers"] and time.monotonic() < deadline:
        time.sleep(0.5)
    # dave, erin and fred start CPU-only at once while carol waits for a GPU: no 429 (the
    # hub's concurrent_spawn_limit is off under scalelab up), a GPU-queued start holds no turn,
    # and they start one at a time (concurrent_starts = 1), the last told its place in line
    trio = ("dave", "erin", "fred")
    with ThreadPoolExecutor(len(trio) * 2) as pool:
        watched = [pool.submit(_progress_until_ready, hub, user) for user in trio]
        started = [pool.submit(_start, hub, user, {"profile": "cpu"}) for user in trio]
        assert [f.result().status_code in (201, 202) for f in started] == [True] * 3
        places = [e for f in watched for e in f.result() if "scalelab_start_queue" in e]
    assert places and {e["scalelab_start_queue"]["position"] for e in places} <= {1, 2}, places
    assert "(at most 1 at once); you are number" in places[0]["message"], places
    for user in trio:
        _wait_ready(hub, user)
        assert _gpus(hub, user) == ""
    turns = re.findall(r"(\S+): turn to start (after|ended)", log.read_text())
    starting: set[str] = set()
    for key, what in turns:
        (starting.add if what == "after" else starting.discard)(key)
        assert len(starting) <= 1, turns
    assert {"dave/", "erin/", "fred/"} <= {key for key, _ in turns}
    assert "carol/" not in {key for key, _ in turns}  # still in the GPU queue

    # alice stops: her GPU goes to carol, the head of the queue, who has waited longer than
    # JupyterHub's start_timeout without her spawn being killed
    time.sleep(max(0.0, carol_asked + START_TIMEOUT_S + 5 - time.monotonic()))
    assert "carol" in [q["user"] for q in hub.api("GET", "/scalelab/gpus").json()["queue"]]
    alice_gpu = _gpus(hub, "alice")
    assert hub.api("DELETE", "/users/alice/server").status_code in (202, 204)
    _wait_ready(hub, "carol")
    assert _gpus(hub, "carol") == alice_gpu
    metrics = hub.api("GET", "/../metrics").text
    # three grants: alice and bob at once, carol after waiting for alice's GPU
    assert "scalelab_gpu_queue_wait_seconds_count 3.0" in metrics
    assert 'scalelab_gpu_queue_wait_seconds_bucket{le="1.0"} 2.0' in metrics
    hours = [
        ln for ln in metrics.splitlines() if ln.startswith('scalelab_gpu_hours_total{group=""}')
    ]
    assert hours and float(hours[0].split()[-1]) > 0


@pytest.fixture(scope="module")
def shared_hub(tmp_path_factory: pytest.TempPathFactory):
    """One GPU hub for the tampered requests, each by a student of its own."""
    with running(_gpu_hub(tmp_path_factory.mktemp("gpu-hub"))) as up:
        yield up


@pytest.mark.parametrize(
    ("user", "options", "status", "message"),
    [
        ("eve1", {"gpus": -1}, 400, "'gpus' must be between 0 and 0 for profile 'cpu', not -1"),
        ("eve2", {"profile": "gpu-1", "gpus": 99}, 400, "between 0 and 1 for profile 'gpu-1'"),
        ("eve3", {"profile": "gpu-1", "gpus": "x"}, 400, "'gpus' must be a whole number, not 'x'"),
        ("eve4", {"profile": "a100"}, 400, "unknown profile 'a100'"),
        ("eve5", {"gpu": 1}, 400, "unknown option(s) ['gpu']"),
        ("eve6", {"profile": "gpu-2"}, 409, "you may hold at most 1 (GPUPolicy.max_gpus_per_user)"),
    ],
)
def test_tampered_requests_are_refused_and_the_next_start_asks_for_no_gpu(
    shared_hub: ScaleLabUp, user: str, options: dict, status: int, message: str
):
    hub = shared_hub
    response = _start(hub, user, options)
    assert response.status_code == status, response.text
    assert message in response.json()["message"]
    assert hub.api("GET", f"/users/{user}").json()["servers"] == {}
    # A start without options does not reuse the refused request: CPU only, no GPU held.
    assert _start(hub, user, None).status_code in (201, 202)
    server = _wait_ready(hub, user)
    assert _gpus(hub, user) == ""
    assert "scalelab" not in server["state"]
    assert hub.api("GET", "/scalelab/gpus").json()["queue"] == []  # nothing held or queued
    assert not [g for g in hub.api("GET", "/scalelab/gpus").json()["gpus"] if g["holder"]]


def test_a_killed_server_releases_its_gpu_at_the_next_poll(hub: ScaleLabUp):
    for user in ("alice", "bob"):
        _start(hub, user, {"profile": "gpu-1"})
        _wait_ready(hub, user)
    assert _start(hub, "carol", {"profile": "gpu-1"}).status_code == 202
    progress_events(hub, "carol", lambda e: "scalelab_queue" in e)
    alice_gpu = _gpus(hub, "alice")
    server_process(hub, "alice").send_signal(signal.SIGKILL)
    _wait_ready(hub, "carol")
    assert _gpus(hub, "carol") == alice_gpu
    assert hub.api("GET", "/users/alice").json()["servers"] == {}
    log = (hub.state_dir / "logs" / "jupyterhub.log").read_text()
    assert (
        "alice/ died (killed by SIGKILL, often the out-of-memory killer) while holding GPU(s) "
        f"{alice_gpu}" in log
    )
    # alice sees why on her next visit: the spawn form says what happened to her server
    form = get_as(hub, "alice", hub.password, "/hub/spawn")
    assert form.status_code == 200
    assert (
        "Your previous server stopped unexpectedly (killed by SIGKILL, often the out-of-memory "
        "killer)" in form.text
    )
    assert f"its GPU(s) {alice_gpu} went back to the pool" in form.text


@pytest.fixture
def short_sessions(tmp_path: Path):
    up = ScaleLabUp(
        tmp_path / "state",
        extra_config=TWO_FAKE_GPUS
        + "c.GPUPolicy.max_gpu_session_hours = 0.02\n"  # 72 s
        + "c.GPUPolicy.gpu_session_warning_minutes = 5\n",
    )
    with running(up):
        yield up


@pytest.mark.asyncio
async def test_a_gpu_session_warns_in_the_notebook_then_stops_keeping_the_files(short_sessions):
    hub = short_sessions
    hub.start_server("alice", {"profile": "gpu-1"})
    assert "SCALELAB_GPU_DEADLINE" in server_environ(hub, "alice")
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pytorch"}).json()
    out = await execute(hub, "alice", kernel["id"], "open('work.txt', 'w').write('mine'); 1 + 1")
    assert out["result"] == "2"
    assert "your GPU session ends at" in out.get("stdout", "")  # a notice: normal output
    deadline = time.monotonic() + 150
    while hub.api("GET", "/users/alice").json()["servers"] and time.monotonic() < deadline:
        time.sleep(1)
    assert hub.api("GET", "/users/alice").json()["servers"] == {}
    assert (hub.state_dir / "homes" / "alice" / "work.txt").read_text() == "mine"
    board = hub.api("GET", "/scalelab/gpus").json()
    assert all(g["holder"] is None for g in board["gpus"])
