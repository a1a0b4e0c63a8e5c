"""GPU readings where the GPU is: each GPU server reads its own GPUs and reports them to the hub.

Through a real hub (``scalelab up``) and real single-user servers: the hub's GPU source is
``ReportedGPUs`` (no NVML on the hub); each server reads its GPUs through
``DeclaredReadings`` (this machine has no GPU: declared readings, configured as the servers'
``c.GPUReporter.source_class``, where a GPU node uses NVML) and posts them with its own token.
The GPU board, and the GPU monitor's idle warning through it, show the server's readings.

The parts that need no running service: ``tests/unit/test_gpu_reports.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests

from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running, server_environ

#: What each declared GPU reads on its server: one idle, one training.
DECLARED = {"GPU-fake-0000": [0.0, 512], "GPU-fake-0001": [87.5, 30000]}


@pytest.fixture
def hub(tmp_path: Path):
    server_args = [
        "--GPUReporter.source_class=scalelab.spawner.gpu_source.DeclaredReadings",
        f"--DeclaredReadings.readings={json.dumps(DECLARED)}",
    ]
    up = ScaleLabUp(
        tmp_path / "state",
        extra_config=TWO_FAKE_GPUS
        + "c.ScaleLabSpawner.gpu_source_class = 'scalelab.spawner.gpu_source.ReportedGPUs'\n"
        + "c.ScaleLabSpawner.gpu_report_interval = 1\n"
        + f"c.ScaleLabSpawner.args = {server_args!r}\n"
        + "c.ScaleLabCulling.poll_interval = 2\n"
        + "c.ScaleLabCulling.gpu_idle_timeout = 40\n"
        + "c.ScaleLabCulling.gpu_idle_warning = 5\n",
    )
    with running(up):
        yield up


def _board(hub: ScaleLabUp) -> dict[str, dict]:
    return {g["uuid"]: g for g in hub.api("GET", "/scalelab/gpus").json()["gpus"]}


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting until {what}")


def _notice(hub: ScaleLabUp, user: str) -> dict | None:
    url = f"{hub.url}/user/{user}/scalelab/api/notice"
    return requests.get(url, headers=hub.auth, timeout=30).json()


def test_the_board_and_the_idle_warning_read_what_each_server_reports(hub: ScaleLabUp):
    hub.start_server("alice", {"profile": "gpu-1"})
    hub.start_server("bob", {"profile": "gpu-1"})
    holder = {g["holder"]["user"]: u for u, g in _board(hub).items() if g["holder"]}
    assert sorted(holder) == ["alice", "bob"]
    assert server_environ(hub, "alice")["SCALELAB_GPU_REPORT_S"] == "1"

    def reported():
        board = _board(hub)
        return all(board[u]["utilization_pct"] is not None for u in holder.values()) and board

    board = _wait(reported, 60, "both servers' readings are on the board")
    for uuid in holder.values():
        util, used = DECLARED[uuid]
        assert (board[uuid]["utilization_pct"], board[uuid]["memory_used_mib"]) == (util, used)

    # the idle GPU's student is warned by the GPU monitor; the training one is not
    idle, busy = sorted(holder, key=lambda user: DECLARED[holder[user]][0])
    message = _wait(lambda: _notice(hub, idle), 60, f"{idle} is warned")["message"]
    assert f"Your GPU(s) {holder[idle]} have been idle" in message
    assert _notice(hub, busy) is None

    # a server reports for its own user only, and only GPUs its server holds
    token = server_environ(hub, "alice")["JUPYTERHUB_API_TOKEN"]

    def post(user: str, server: str, uuid: str) -> requests.Response:
        return requests.post(
            f"{hub.url}/hub/api/scalelab/users/{user}/gpu-readings",
            headers={"Authorization": f"token {token}"},
            json={"server": server, "gpus": [{"uuid": uuid, "utilization_pct": 0.0}]},
            timeout=30,
        )

    forged = post("bob", "", holder["bob"])
    # JupyterHub's answer to a token without the scope on that user: 404, "No access"
    assert forged.status_code == 404, forged.text
    assert "No access" in forged.json()["message"]
    assert _board(hub)[holder["bob"]]["utilization_pct"] == DECLARED[holder["bob"]][0]
    none_held = post("alice", "second", holder["bob"])
    assert none_held.status_code == 409
    assert "alice/second holds no GPU" in none_held.json()["message"]
    # naming bob's GPU in her own report: refused whole, bob's reading stays
    foreign = post("alice", "", holder["bob"])
    assert foreign.status_code == 403, foreign.text
    assert f"alice/ does not hold GPU(s) {holder['bob']}" in foreign.json()["message"]
    assert _board(hub)[holder["bob"]]["utilization_pct"] == DECLARED[holder["bob"]][0]

    # the monitor polled every 2 s and each server reported every 1 s: none of those routine
    # calls is a line in the server logs or the hub's (debug level, see scalelab.common.access_log)
    logs = hub.state_dir / "logs"
    for log in (logs / "jupyterhub.log", *(logs / "servers" / u / "server.log" for u in holder)):
        routine = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if line.startswith("[I ")
            and ("(scalelab-gpu-monitor@" in line or "/gpu-readings" in line)
        ]  # the refused reports above are warnings, and stay
        assert routine == [], (log.name, routine[:3])
