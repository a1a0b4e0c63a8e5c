"""``bench/hub_load.py``: its baseline is a plain JupyterHub, and a small run reports both hubs.

Real hubs, configurable-http-proxy and the bench's tiny stand-in servers; sizes are small so
that the test checks what the bench measures, never how fast (speed is the bench's to print).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.hub_load import BASELINE_PATHS, BareHub, admin_token, load, start_servers

REPO = Path(__file__).resolve().parents[3]
TINY = str(REPO / "bench" / "tiny_server.py")


def test_baseline_is_plain_jupyterhub(tmp_path: Path) -> None:
    """The baseline runs none of ScaleLab: no GPU board, no ScaleLab services or spawner, and
    the bench's load on it succeeds."""
    hub = BareHub(tmp_path / "baseline", tiny=TINY, batch=2)
    assert "scalelab" not in hub.config.read_text().lower()
    try:
        hub.start()
        assert hub.api("GET", "/scalelab/gpus").status_code == 404
        info = hub.api("GET", "/info").json()
        assert info["spawner"]["class"] == "jupyterhub.spawner.SimpleLocalProcessSpawner"
        assert not [s for s in hub.api("GET", "/services").json() if "scalelab" in s]
        users = ["student000", "student001"]
        start_servers(hub, users, batch=2)
        latencies, failures = load(hub, admin_token(hub), users, 12, 6, BASELINE_PATHS)
        assert failures == 0 and len(latencies) == 12
    finally:
        hub.close()


def test_small_run_reports_both_hubs() -> None:
    """One JSON object with ScaleLab's figures, the baseline's beside them and their ratio."""
    argv = [sys.executable, "bench/hub_load.py", "--servers", "2", "--requests", "24"]
    done = subprocess.run(
        [*argv, "--concurrency", "8"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["servers"] == 2 and result["requests"] == 24
    assert result["failures"] == 0 and result["baseline_failures"] == 0
    for key in ("p50_ms", "p99_ms", "baseline_p50_ms", "baseline_p99_ms"):
        assert result[key] > 0, key
    assert result["p99_ratio"] == pytest.approx(
        result["p99_ms"] / result["baseline_p99_ms"], abs=0.01
    )
    assert result["hub_cpu_ms_per_request"] > 0
    assert result["baseline_hub_cpu_ms_per_request"] > 0
    assert result["load_avg_1m_at_start"] >= 0
