"""What ops get to watch a hub: the shipped Prometheus alert rules (promtool checks them and runs
their unit tests), the Grafana dashboard, and the gauges of scalelab.spawner.health_metrics.

That every series the rules and the dashboard use is one a real hub serves is checked on a
running hub in tests/integration/hub/test_gpu_hub.py (:func:`metric_names`, :func:`served`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from scalelab.common.ports import free_port
from scalelab.spawner.health_metrics import HealthCollector, store_reachable, tree_memory_bytes

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "scalelab" / "monitoring"
RULES = MONITORING / "alerts.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
RULE_TESTS = ROOT / "tests" / "support" / "data" / "monitoring" / "alerts_test.yml"
PROMTOOL = Path(sys.executable).parent / "promtool"  # install.sh unpacks it into the venv

#: PromQL words that are not series names.
_PROMQL = {
    "sum", "by", "on", "rate", "increase", "topk", "histogram_quantile", "le", "and", "or",
    "unless", "without", "ignoring", "group_left", "group_right", "bool", "offset", "humanize",
}  # fmt: skip


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PROMTOOL), *args], capture_output=True, text=True, timeout=120, check=False
    )


def expressions() -> list[str]:
    """Every PromQL expression of the rules and the dashboard."""
    rules = re.findall(
        r"^\s+expr: (?:>-\n)?((?:.+\n?)+?)(?=^\s+(?:for|labels):)", RULES.read_text(), re.M
    )
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [" ".join(r.split()) for r in rules] + [t["expr"] for p in panels for t in p["targets"]]


def metric_names() -> set[str]:
    """The series names the expressions read, as a hub's ``/hub/metrics`` writes them (a
    sample's name, or the ``# HELP`` line's of a family with no sample yet), Prometheus' own
    ``up`` left out."""
    names = set()
    for expr in expressions():
        expr = re.sub(
            r'\{[^}]*\}|"[^"]*"|\[[^\]]*\]|\b(by|on|without|ignoring) *\([^)]*\)', " ", expr
        )
        for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
            if word not in _PROMQL and word != "up":
                names.add(word)
    return names


def served(name: str, metrics_text: str) -> bool:
    """Whether a hub's ``/hub/metrics`` text has series ``name`` (a sample or its HELP line)."""
    return re.search(rf"^(# HELP )?{re.escape(name)}[ {{]", metrics_text, re.M) is not None


def test_promtool_accepts_the_rules_and_their_unit_tests_pass():
    checked = _promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 9 rules found" in checked.stdout
    tested = _promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_dashboard_query_parses_and_each_panel_has_a_place(tmp_path: Path):
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels) == 14
    assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in panels)
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    # promtool parses PromQL only in rule files: each query as a recording rule
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"scalelab:dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}  # fmt: skip
    as_rules = tmp_path / "dashboard_rules.yml"
    as_rules.write_text(json.dumps(rules))  # JSON is YAML
    checked = _promtool("check", "rules", str(as_rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in checked.stdout


def test_the_expressions_read_these_families():
    assert metric_names() == {
        "jupyterhub_running_servers",
        "jupyterhub_server_spawn_duration_seconds_bucket",
        "jupyterhub_server_spawn_duration_seconds_count",
        "scalelab_gpu_hours_total",
        "scalelab_gpu_queue_length",
        "scalelab_gpu_queue_wait_seconds_bucket",
        "scalelab_gpu_source_errors_total",
        "scalelab_gpus_allocated",
        "scalelab_gpus_quarantined",
        "scalelab_gpus_total",
        "scalelab_server_memory_bytes",
        "scalelab_server_memory_limit_bytes",
        "scalelab_server_oom_kills",
        "scalelab_spark_executor_gpus_granted",
        "scalelab_store_reachable",
        "scalelab_yarn_reachable",
    }


def test_a_store_is_reachable_when_its_folder_exists_or_a_server_answers(tmp_path: Path):
    assert store_reachable(tmp_path.as_uri(), {}, {}) is True
    assert store_reachable((tmp_path / "gone").as_uri(), {}, {}) is False
    closed = free_port()
    assert store_reachable(f"hdfs://127.0.0.1:{closed}/course", {}, {}) is False
    assert store_reachable("memory://course", {}, {}) is True  # names no server to ask


def test_the_collector_serves_the_last_looks_and_each_servers_memory():
    looks = {"store": True, "yarn": False}
    servers = [("alice", "", os.getpid(), 2 * 2**30), ("bob", "gpu", 2**22 + 7, 0)]
    collector = HealthCollector(
        {name: (lambda v=v: v) for name, v in looks.items()}, lambda: servers, "hdfs"
    )
    assert [m.name for m in collector.describe()] == [
        "scalelab_server_memory_bytes",
        "scalelab_server_memory_limit_bytes",
        "scalelab_server_oom_kills",
        "scalelab_store_reachable",
        "scalelab_yarn_reachable",
    ]
    assert [m.name for m in collector.collect()] == [  # nothing probed yet: no reachability
        "scalelab_server_memory_bytes",
        "scalelab_server_memory_limit_bytes",
        "scalelab_server_oom_kills",
    ]
    collector.probe_once()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }
    assert samples[("scalelab_store_reachable", (("protocol", "hdfs"),))] == 1.0
    assert samples[("scalelab_yarn_reachable", ())] == 0.0
    mine = samples[("scalelab_server_memory_bytes", (("server", ""), ("user", "alice")))]
    assert 10 * 2**20 < mine < 8 * 2**30  # this test process's tree: some MiB, not nothing
    assert samples[("scalelab_server_memory_bytes", (("server", "gpu"), ("user", "bob")))] == 0.0
    assert samples[("scalelab_server_memory_limit_bytes", (("server", ""), ("user", "alice")))] == (
        2 * 2**30
    )
    assert (
        "scalelab_server_memory_limit_bytes",
        (("server", "gpu"), ("user", "bob")),
    ) not in samples


def test_a_probe_that_raises_is_a_failed_look():
    def broken() -> bool:
        raise OSError("no route to host")

    collector = HealthCollector({"store": broken}, lambda: [], "s3")
    collector.probe_once()
    assert collector.readings == {"store": False}
    assert tree_memory_bytes(2**22 + 7) == 0  # a pid that is gone


def test_every_series_is_documented_for_operators():
    guide = (ROOT / "docs" / "operators-guide.md").read_text()
    families = {re.sub(r"_(bucket|count)$", "", n) for n in metric_names()}
    assert sorted(f for f in families if f"`{f}" not in guide) == []
