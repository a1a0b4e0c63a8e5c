"""Live logs and the Spark UI through the hub: the pure parts of the log handlers, then a real
``scalelab up`` where a student follows the server's and the Spark driver's logs while they grow
and opens the Spark UI through the hub's proxy (jupyter-server-proxy).

The parts that need no running service: ``tests/unit/test_live_logs.py``.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.support.hubproc import ScaleLabUp, execute, running


def _follow(url: str, headers: dict, lines: queue.Queue, stop: threading.Event) -> None:
    """Read a log's event stream into ``lines`` until ``stop`` (or the server ends it)."""
    try:
        with requests.get(url, headers=headers, stream=True, timeout=120) as response:
            lines.put(("status", response.status_code, response.headers.get("Content-Type")))
            for line in response.iter_lines(decode_unicode=True):
                if line and line.startswith("data: "):
                    lines.put(("data", line[len("data: ") :], None))
                if stop.is_set():
                    return
    except requests.RequestException as exc:  # the server stopping ends the stream
        if not stop.is_set():
            lines.put(("error", repr(exc), None))


def _await_line(lines: queue.Queue, pattern: str, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            kind, text, _ = lines.get(timeout=1)
        except queue.Empty:
            continue
        if kind == "data" and re.search(pattern, text):
            return text
    raise AssertionError(f"no line matching {pattern!r} arrived in {timeout_s} s")


@pytest.mark.asyncio
async def test_logs_follow_live_and_spark_ui_opens_through_the_hub(tmp_path: Path):
    with running(ScaleLabUp(tmp_path / "state", warm_spark=True)) as hub:
        hub.start_server("bob")
        base = f"{hub.url}/user/bob"

        assert requests.get(f"{base}/scalelab/api/logs", timeout=30).status_code in (302, 403)
        listed = requests.get(f"{base}/scalelab/api/logs", headers=hub.auth, timeout=30)
        assert listed.status_code == 200
        assert "server.log" in [log["name"] for log in listed.json()["logs"]]
        for bad in ("..%2F..%2Fjupyterhub.sqlite", "server.txt", ".scalelab"):
            url = f"{base}/scalelab/api/logs/{bad}"
            assert requests.get(url, headers=hub.auth, timeout=30).status_code == 404, bad

        # Follow the server's log, then make the server log something new: it arrives live.
        lines: queue.Queue = queue.Queue()
        stop = threading.Event()
        follower = threading.Thread(
            target=_follow,
            args=(f"{base}/scalelab/api/logs/server.log?tail=0", hub.auth, lines, stop),
            daemon=True,
        )
        follower.start()
        kind, status, content_type = lines.get(timeout=60)
        assert (kind, status) == ("status", 200)
        assert content_type.startswith("text/event-stream")
        marker = f"no-such-notebook-{time.time_ns()}.ipynb"
        hub.server_api("bob", "GET", f"/contents/{marker}")
        _await_line(lines, re.escape(marker))
        stop.set()

        # A PySpark kernel: its driver's UI behind the hub's proxy, its log followed live.
        kernel = hub.server_api("bob", "POST", "/kernels", json={"name": "scalelab-pyspark"})
        kernel_id = kernel.json()["id"]
        out = await execute(hub, "bob", kernel_id, "spark.range(100).count()")
        assert out["result"] == "100", out
        ready = " ".join(bundle.get("text/plain", "") for bundle in out["display"])
        ui = re.search(r"Spark UI: (?P<url>(/user/bob/sparkui/(\d+)/)\S*)", ready)
        assert ui, out
        assert f'<a href="{ui["url"]}" target="_blank"' in out["display"][-1]["text/html"]
        # Opened exactly as printed: the UI's root would redirect to the hub's /jobs/ (404).
        page = requests.get(f"{hub.url}{ui['url']}", headers=hub.auth, timeout=60)
        assert page.status_code == 200
        assert "Spark Jobs" in page.text
        assert f"{ui.group(2)}static/" in page.text  # links go back through the proxy
        conf = await execute(hub, "bob", kernel_id, "spark.conf.get('spark.ui.proxyBase')")
        assert conf["result"] == f"'/user/bob/sparkui/{ui.group(3)}'"
        # jupyter-server-proxy's generic route to the same port is off: this server has no
        # sandbox, and its loopback is every student's (issue 31)
        generic = requests.get(f"{base}/proxy/{ui.group(3)}/", headers=hub.auth, timeout=60)
        assert generic.status_code == 404, generic.status_code

        logs = requests.get(f"{base}/scalelab/api/logs", headers=hub.auth, timeout=30).json()
        driver = [log["name"] for log in logs["logs"] if log["name"].startswith("spark-driver-")]
        assert len(driver) == 1
        lines = queue.Queue()
        stop = threading.Event()
        threading.Thread(
            target=_follow,
            args=(f"{base}/scalelab/api/logs/{driver[0]}?tail=0", hub.auth, lines, stop),
            daemon=True,
        ).start()
        assert lines.get(timeout=60)[1] == 200
        await execute(hub, "bob", kernel_id, "spark.range(7).repartition(3).count()")
        _await_line(lines, r"INFO .*(Job \d+ finished|Submitting|Starting job)")
        stop.set()

        page = requests.get(f"{base}/scalelab/logs", headers=hub.auth, timeout=30)
        assert page.status_code == 200
        assert driver[0] in page.text and "EventSource" in page.text
        plain = requests.get(
            f"{base}/scalelab/api/logs/server.log?follow=0", headers=hub.auth, timeout=30
        )
        assert plain.headers["Content-Type"].startswith("text/plain")
        assert marker in plain.text
