"""Live server logs for ops and the hub's security rules, through a real ``scalelab up``.

One hub (with a declared inventory of ONE fake GPU, so that a second GPU request queues): the
admin reads and follows a student's server log as JSON lines, including the log of a PySpark
kernel's Spark driver and what the kernel writes to stderr; the log outlives the server. A
student can see neither another's server, log, GPU board nor queue; pending spawns are limited
with "Try again"; no password or token ends up in any log.

The parts that need no running service: ``tests/unit/test_ops_hub.py``.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

import pytest
import requests
from tornado.simple_httpclient import HTTPTimeoutError

from tests.support.hubproc import ScaleLabUp, execute, get_as, running

OPS_PASSWORD = "ops-" + "y" * 40


ONE_FAKE_GPU = (
    "c.ScaleLabSpawner.declared_gpus = [{'uuid': 'GPU-fake-0000', 'name': 'fake test GPU'}]\n"
)


@pytest.fixture
def hub(tmp_path: Path):
    up = ScaleLabUp(
        tmp_path / "state",
        extra_config=ONE_FAKE_GPU
        + "c.JupyterHub.concurrent_spawn_limit = 1\n"
        + "c.Authenticator.admin_users = {'ops'}\n"
        + f"c.SharedPasswordAuthenticator.admin_password = {OPS_PASSWORD!r}\n",
        warm_spark=True,
    )
    with running(up):
        yield up


def _follow(hub: ScaleLabUp, user: str, lines: queue.Queue, log: str = "") -> threading.Thread:
    """Follow ``user``'s log (or another of theirs, ``log``) as JSON lines in a thread, putting
    each record in ``lines``."""

    def run() -> None:
        url = f"{hub.url}/hub/api/scalelab/logs/{user}?follow=1&log={log}"
        try:
            with requests.get(url, headers=hub.auth, stream=True, timeout=120) as response:
                for raw in response.iter_lines(decode_unicode=True):
                    if raw:
                        lines.put(json.loads(raw))
        except requests.RequestException:  # the hub stopping ends the stream
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def execute_when_ready(
    hub: ScaleLabUp, user: str, kernel_id: str, code: str, timeout_s: float = 240
) -> dict:
    """``execute``, retried while the WebSocket handshake times out (tornado's 20 s) because
    the kernel is still starting (Spark, torch) on a loaded machine."""
    for _ in range(8):
        try:
            return await execute(hub, user, kernel_id, code, timeout_s)
        except HTTPTimeoutError:
            continue
    raise AssertionError("the kernel never accepted a connection")


def _wait_for_line(lines: queue.Queue, needle: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            record = lines.get(timeout=1)
        except queue.Empty:
            continue
        if needle in record["line"]:
            return record
    raise AssertionError(f"{needle!r} never arrived in the followed log")


@pytest.mark.asyncio
async def test_live_logs_for_ops_and_what_a_student_cannot_see(hub):
    hub.start_server("alice", {"profile": "cpu"})
    # the admin reads alice's log as JSON lines
    response = hub.api("GET", "/scalelab/logs/alice")
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/x-ndjson"
    records = [json.loads(line) for line in response.text.splitlines()]
    assert records[0]["line"].startswith("==== ScaleLab: server alice/ starting at ")
    assert {r["user"] for r in records} == {"alice"}
    assert any("Jupyter Server" in r["line"] for r in records)
    # a shipper resumes at an offset: only what came after
    resumed = hub.api("GET", "/scalelab/logs/alice", params={"offset": records[0]["offset"]})
    assert json.loads(resumed.text.splitlines()[0]) == records[1]

    # follow it live while a PySpark kernel starts its Spark driver, then writes to its stderr
    lines: queue.Queue = queue.Queue()
    _follow(hub, "alice", lines)
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pyspark"}).json()
    # the Spark driver's own log: listed beside the server's, and followed live
    driver_logs: list[str] = []
    deadline = time.monotonic() + 180
    while not driver_logs and time.monotonic() < deadline:
        listed = hub.api("GET", "/scalelab/logfiles/alice").json()["logs"]
        driver_logs = [name for name in listed if name.startswith("spark-driver-")]
        time.sleep(1)
    assert driver_logs and "server.log" in listed, listed
    driver_lines: queue.Queue = queue.Queue()
    _follow(hub, "alice", driver_lines, log=driver_logs[0])
    _wait_for_line(driver_lines, "Running Spark version", 180)
    assert hub.api("GET", "/scalelab/logs/alice", params={"log": "../x.log"}).status_code == 404
    code = "import sys; print('driver-log-marker-42', file=sys.__stderr__, flush=True)"
    assert (await execute_when_ready(hub, "alice", kernel["id"], code))["status"] == "ok"
    _wait_for_line(lines, "driver-log-marker-42", 60)

    # the admin page follows the same stream
    page = get_as(hub, "ops", OPS_PASSWORD, "/hub/scalelab/logs/alice")
    assert page.status_code == 200 and "Log of alice" in page.text
    assert "api/scalelab/logs/alice?follow=1" in page.text

    # a student: her own token and her browser session
    bob = hub.api("POST", "/users/bob")
    assert bob.status_code == 201
    token = hub.api("POST", "/users/bob/tokens", json={"note": "test"}).json()["token"]
    as_bob = {"Authorization": f"token {token}"}
    for path in (
        "/hub/api/scalelab/logs/alice",
        "/hub/api/scalelab/logs/bob",
        "/hub/api/scalelab/gpus",
        "/hub/api/users/alice",
        "/user/alice/api/contents",
    ):
        got = requests.get(f"{hub.url}{path}", headers=as_bob, timeout=30, allow_redirects=False)
        assert got.status_code in (403, 404), (path, got.status_code, got.text[:200])
        assert "driver-log-marker-42" not in got.text
    for path in ("/hub/scalelab/logs/alice", "/hub/scalelab/gpus"):
        got = get_as(hub, "bob", hub.password, path, allow_redirects=False)
        assert got.status_code == 403, (path, got.status_code)

    # the GPU queue: eve holds the only GPU, carol queues; bob cannot see carol's entry
    hub.start_server("eve", {"profile": "gpu-1"})
    assert hub.api("POST", "/users/carol").status_code == 201
    queued = hub.api("POST", "/users/carol/server", json={"user_options": {"profile": "gpu-1"}})
    assert queued.status_code == 202
    board = requests.get(f"{hub.url}/hub/api/scalelab/gpus", headers=as_bob, timeout=30)
    assert board.status_code == 403 and "carol" not in board.text
    # a second pending spawn is over concurrent_spawn_limit = 1: a clear "try again"
    assert hub.api("POST", "/users/dave").status_code == 201
    refused = hub.api("POST", "/users/dave/server", json={"user_options": {"profile": "cpu"}})
    assert refused.status_code == 429
    assert "Try again in" in refused.json()["message"]
    assert hub.api("GET", "/users/dave").json()["servers"] == {}
    assert hub.api("DELETE", "/users/carol/server").status_code in (202, 204)

    # the log outlives the server
    assert hub.api("DELETE", "/users/alice/server").status_code in (202, 204)
    deadline = time.monotonic() + 60
    while hub.api("GET", "/users/alice").json()["servers"] and time.monotonic() < deadline:
        time.sleep(1)
    after = hub.api("GET", "/scalelab/logs/alice")
    assert after.status_code == 200 and "driver-log-marker-42" in after.text

    # no password or token in any log: the hub's, the servers', the proxy's
    secrets = [hub.password, OPS_PASSWORD, token, hub.token]
    for log in (hub.state_dir / "logs").rglob("*.log"):
        text = log.read_text(errors="replace")
        for secret in secrets:
            assert secret not in text, f"a secret is in {log}"
    assert "".join(hub.output).count(hub.password) == 1  # the banner shows it once, on purpose


def test_the_log_page_and_api_answer_404_for_a_user_the_hub_does_not_know(hub):
    page = get_as(hub, "ops", OPS_PASSWORD, "/hub/scalelab/logs/nobody")
    assert page.status_code == 404
    assert "no user" in page.text and "nobody" in page.text and "on this hub" in page.text
    missing = hub.api("GET", "/scalelab/logs/nobody")
    assert missing.status_code == 404
    assert missing.json()["message"].startswith("no user 'nobody' on this hub")
    assert hub.api("GET", "/scalelab/logfiles/nobody").status_code == 404
    known = hub.api("GET", "/scalelab/logs/ops")  # a known user without a server yet
    assert known.status_code == 404 and "no log of ops/" in known.json()["message"]
