"""Benchmark: a whole class starting at once, on ScaleLab's hub and on a plain JupyterHub.

``--students`` N students (default 40) are released together, each in a thread of its own, as
when a lab session starts: each signs in through the hub's login form, starts their default
server through the hub's REST API with their own cookie (as the hub's home page does) and waits
for it on the spawn's progress stream (as the spawn page does), then opens a kernel of the
server's default kernelspec and runs a first cell (``1 + 1``) through the kernel's WebSocket
(with the bench's admin token: the server's OAuth dance is left out).

Two hubs, each started anew for its turn and stopped with every server before the other's:

- ``scalelab``: JupyterHub on ScaleLab's generated configuration, as ``scalelab up`` writes it
  (:class:`tests.support.hubproc.PlainHub`: ``ScaleLabSpawner``, the course's kernelspecs with
  PySpark the default, a warm PySpark kernel per server as shipped, the GPU board, culler and
  monitor services, ScaleLab's authenticator);
- ``plain``: JupyterHub with ``SimpleLocalProcessSpawner`` (``LocalProcessSpawner``, the
  upstream parent of ``ScaleLabSpawner``, as the hub's own user), ``jupyterhub-singleuser``
  (JupyterLab) and ipykernel's ``python3``, ``DummyAuthenticator`` with one password,
  configurable-http-proxy, SQLite: what an operator would run instead.

Both run on this machine's cores with every server as the bench's user (root here, so
ScaleLab's shared identity); ``--rounds`` R runs each hub R times, alternating which goes first.

Prints one JSON object with, for each hub (``scalelab_*``, ``plain_*``): ``last_answer_s``
(seconds from the release until the last student's first cell answered, median over rounds),
``p50_s``, ``p95_s``, ``p99_s`` (each student's seconds to the answer, over every round's
students), ``stage_medians_s`` (sign-in, server ready, kernel started, answered: seconds since
the release), ``failures`` (students with no answer, goal 0) and ``failure_reasons`` (the first
few), ``hub_cpu_s`` (the hub process's CPU seconds, user + system, from the release to the last
answer; median over rounds), ``hub_peak_rss_mib`` (the hub process's peak resident memory,
``VmHWM``; the largest), ``used_mib_peak`` (the machine's used memory at its highest from the
release until ``--settle`` seconds (30) after the last answer, less before it; the largest);
``last_answer_ratio`` and ``p99_ratio`` (scalelab / plain: the goal is at most 1.0);
``students``, ``rounds``, and the load average and CPU seconds every bench prints
(``bench/_run_info.py``).

Usage: ``.venv/bin/python bench/class_start.py [--students N] [--rounds R] [--settle S]
[--concurrent-starts K] [--quick]`` from the repository root (``--quick``: 8 students, 1
round; ``--concurrent-starts``: ScaleLab's ``c.ScaleLabSpawner.concurrent_starts``, default
its own, 20).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo, vm_hwm
from bench.hub_load import BARE_HUB, BareHub
from scalelab.spawner.start_queue import LOCAL_CONCURRENT_STARTS
from tests.support.hubproc import PlainHub, execute, form_login, progress_events

#: The plain JupyterHub: upstream's parts only (bench/hub_load.py's, with real servers).
PLAIN = (
    BARE_HUB
    + """\
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = "{state}/homes/{{username}}"
c.Spawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.args = {args!r}
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 600
c.Spawner.http_timeout = 600
c.JupyterHub.services = [{{"name": "bench", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["bench"]}}]
"""
)

#: The first cell every student runs.
FIRST_CELL = "1 + 1"


@dataclass
class Student:
    """One student's way through the class start: seconds since the release at each stage."""

    name: str
    stages: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def _since(t0: float) -> float:
    return round(time.monotonic() - t0, 3)


def run_student(hub: PlainHub, student: Student, release: threading.Barrier, t0: list) -> None:
    """Sign in, start the server, open the default kernel, run :data:`FIRST_CELL`."""
    release.wait()
    start = t0[0]
    try:
        with requests.Session() as session:
            login = form_login(session, hub.url, student.name, hub.password)
            if login.status_code != 302:
                raise RuntimeError(f"sign-in answered {login.status_code}")
            student.stages["signed_in"] = _since(start)
            xsrf = {"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/") or ""}
            spawn = session.post(
                f"{hub.url}/hub/api/users/{student.name}/server", headers=xsrf, timeout=600
            )
            if spawn.status_code not in (201, 202):
                raise RuntimeError(f"spawn answered {spawn.status_code}: {spawn.text[:200]}")
            if spawn.status_code == 202:  # pending: the spawn page's progress stream
                events = progress_events(
                    hub, student.name, lambda e: e.get("ready") or e.get("failed"), 600
                )
                if not events[-1].get("ready"):
                    raise RuntimeError(f"spawn failed: {events[-1].get('message')}")
            student.stages["ready"] = _since(start)
        headers = {"Authorization": f"token {hub.token}"}
        kernel = requests.post(
            f"{hub.url}/user/{student.name}/api/kernels", headers=headers, json={}, timeout=600
        )
        if kernel.status_code != 201:
            raise RuntimeError(f"kernel start answered {kernel.status_code}: {kernel.text[:200]}")
        student.stages["kernel"] = _since(start)
        reply = asyncio.run(
            execute(hub, student.name, kernel.json()["id"], FIRST_CELL, timeout_s=600)
        )
        if reply["result"] != "2":
            raise RuntimeError(f"first cell: {reply}")
        student.stages["answered"] = _since(start)
    except Exception as exc:  # noqa: BLE001 -- every failure is counted and named
        student.error = f"{type(exc).__name__}: {exc}"[:300]


def _hub_process(hub: PlainHub) -> psutil.Process:
    assert hub.proc is not None
    return psutil.Process(hub.proc.pid)


def _used_bytes() -> int:
    memory = psutil.virtual_memory()
    return memory.total - memory.available


def class_start(hub: PlainHub, names: list[str], settle_s: float) -> dict:
    """Release ``names`` together on ``hub`` (started); their stages and the hub's figures,
    the machine's memory sampled until ``settle_s`` seconds after the last answer (what the
    kernels start in the background, a Spark driver say, counts too)."""
    students = [Student(name) for name in names]
    release = threading.Barrier(len(students) + 1)
    t0: list[float] = []
    threads = [
        threading.Thread(target=run_student, args=(hub, s, release, t0), daemon=True)
        for s in students
    ]
    for thread in threads:
        thread.start()
    hub_proc = _hub_process(hub)
    used_before = _used_bytes()
    used_peak = used_before
    cpu = hub_proc.cpu_times()
    t0.append(time.monotonic())
    release.wait()
    while any(thread.is_alive() for thread in threads):
        used_peak = max(used_peak, _used_bytes())
        time.sleep(0.5)
    after = hub_proc.cpu_times()
    settled = time.monotonic() + settle_s
    while time.monotonic() < settled:
        used_peak = max(used_peak, _used_bytes())
        time.sleep(0.5)
    return {
        "students": students,
        "hub_cpu_s": (after.user + after.system) - (cpu.user + cpu.system),
        "hub_peak_rss": vm_hwm(hub_proc.pid),
        "used_peak": used_peak - used_before,
    }


def _percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, nearest rank."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summary(runs: list[dict]) -> dict:
    """One hub's figures over its rounds (see the module docstring)."""
    students = [s for run in runs for s in run["students"]]
    answered = [s.stages["answered"] for s in students if s.error is None]
    failed = [s for s in students if s.error is not None]
    lasts = [
        max(s.stages.get("answered", 0) for s in run["students"])
        for run in runs
        if all(s.error is None for s in run["students"])
    ]
    stages = {}
    for stage in ("signed_in", "ready", "kernel", "answered"):
        values = [s.stages[stage] for s in students if stage in s.stages]
        stages[stage] = round(statistics.median(values), 2) if values else None
    return {
        "last_answer_s": round(statistics.median(lasts), 2) if lasts else None,
        "p50_s": round(_percentile(answered, 50), 2) if answered else None,
        "p95_s": round(_percentile(answered, 95), 2) if answered else None,
        "p99_s": round(_percentile(answered, 99), 2) if answered else None,
        "stage_medians_s": stages,
        "failures": len(failed),
        "failure_reasons": sorted({s.error for s in failed})[:5],
        "hub_cpu_s": round(statistics.median(r["hub_cpu_s"] for r in runs), 2),
        "hub_peak_rss_mib": round(max(r["hub_peak_rss"] for r in runs) / 2**20, 1),
        "used_mib_peak": round(max(r["used_peak"] for r in runs) / 2**20),
    }


def one_turn(
    kind: str, tmp: Path, round_index: int, n: int, settle_s: float, starts: int | None = None
) -> dict:
    """Start ``kind``'s hub anew, run the class start on it, close it with every server;
    ``starts``: ScaleLab's ``concurrent_starts`` (None: its default)."""
    state = tmp / f"{kind}-{round_index}"
    args = ["--allow-root"] if os.geteuid() == 0 else []
    extra = "" if starts is None else f"c.ScaleLabSpawner.concurrent_starts = {starts}\n"
    hub = (
        PlainHub(state, extra, warm_spark=True)
        if kind == "scalelab"
        else BareHub(state, PLAIN, args=args)
    )
    try:
        hub.start()
        names = [f"{kind[0]}{round_index}s{i:03d}" for i in range(n)]
        return class_start(hub, names, settle_s)
    finally:
        hub.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40, help="students at once (40)")
    parser.add_argument("--rounds", type=int, default=1, help="turns of each hub (1)")
    parser.add_argument("--quick", action="store_true", help="8 students, 1 round")
    parser.add_argument(
        "--settle", type=float, default=30.0, help="seconds of memory readings after the class"
    )
    parser.add_argument(
        "--concurrent-starts",
        type=int,
        default=None,
        help="ScaleLab's c.ScaleLabSpawner.concurrent_starts (default: its own, 20)",
    )
    args = parser.parse_args()
    if args.students < 1 or args.rounds < 1:
        parser.error("--students and --rounds must be 1 or more")
    info = RunInfo()
    n, rounds = (8, 1) if args.quick else (args.students, args.rounds)
    runs: dict[str, list[dict]] = {"scalelab": [], "plain": []}
    with tempfile.TemporaryDirectory(prefix="scalelab-bench-class-") as tmp:
        for r in range(rounds):
            order = ["plain", "scalelab"] if r % 2 == 0 else ["scalelab", "plain"]
            for kind in order:
                runs[kind].append(
                    one_turn(kind, Path(tmp), r, n, args.settle, args.concurrent_starts)
                )
    report: dict = {
        "students": n,
        "rounds": rounds,
        "concurrent_starts": args.concurrent_starts or LOCAL_CONCURRENT_STARTS,
    }
    for kind, kind_runs in runs.items():
        report.update({f"{kind}_{key}": value for key, value in summary(kind_runs).items()})
    for key in ("last_answer_s", "p99_s"):
        s, p = report[f"scalelab_{key}"], report[f"plain_{key}"]
        report[f"{key.removesuffix('_s')}_ratio"] = round(s / p, 3) if s and p else None
    report["baseline"] = (
        "JupyterHub with SimpleLocalProcessSpawner, jupyterhub-singleuser and python3; "
        "DummyAuthenticator"
    )
    print(json.dumps({**report, **info.figures()}))


if __name__ == "__main__":
    main()
