"""Seconds to a first cell and a first Spark result: ScaleLab's PySpark kernel against a plain one.

The baseline is what a student would run instead: a plain ipykernel in the same virtual
environment (kernelspec ``[python, -m, ipykernel_launcher, -f, {connection_file}]``, the same
environment variables) where the student writes the session where they need it::

    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]")
             .config("spark.driver.memory", "1g").getOrCreate())

ScaleLab's kernel (``scalelab-pyspark``) has the same master and driver memory
(``SCALELAB_SPARK_MASTER=local[2]``, ``SCALELAB_SPARK_DRIVER_MEMORY=1g``) and builds ``spark``
in a background thread. Each kernel is timed from "start the kernel" in two ways, each in a
fresh kernel:

- ``cell_first``: a first cell that does not use Spark (``6 * 7``): ``*_first_cell_median_s``;
  then at once the Spark cell (plain: the lines above and ``spark.range(3).count()``;
  ScaleLab: ``spark.range(3).count()``): the time until that result is ``*_spark_ready_median_s``,
  when ``spark`` is usable for a student who ran something else first;
- ``spark_first``: the Spark cell is the first cell: ``*_first_spark_median_s``.

A third kind, ``warm``, is ScaleLab's kernel started ahead by a single-user server's kernel
manager (:class:`scalelab.hub_ext.server.warm_kernel.WarmKernelManager`, run here in the bench's
own process on an event loop of its own, as a server runs it): before each such run (untimed, as
a server does ahead of the student's click) a new manager starts its warm kernel and it is
waited for; the run is timed from the manager's ``start_kernel`` request, as jupyter_server's
session and REST handlers call it, and records whether that request got the warm kernel
(``took_warm``). The CPU seconds and peak RSS are the warm kernel's process tree's, its warm-up
included. ``warm_spark_ready_median_s`` is the figure of issue 17 (``spark`` usable within 2 s
of the start request) and of issue 34 (within 0.5 s); ``warm_spark_ready_ratio`` and
``warm_first_spark_ratio`` compare it with ScaleLab's kernel starting its own driver (below 1:
the warm kernel is sooner), with their paired medians.

The six variants (3 kinds x 2 ways) run in rounds, the order rotated by one each round, one
kernel at a time; one untimed plain start with Spark warms the page cache first. Just before
each kernel is shut down, the CPU seconds (user + system) of its process tree (the kernel and
its JVM) and the sum of their peak RSS (``VmHWM``) are read with psutil: ``*_cpu_median_s``
and ``*_peak_rss_median_mib`` per variant.

Prints one JSON object: the medians above, ``first_cell_ratio``, ``first_spark_ratio`` and
``spark_ready_ratio`` (ScaleLab's median / plain's: below 1, ScaleLab is sooner) and
``*_ratio_paired_median`` (the median of each round's ScaleLab / plain, the two runs of a round
being close in time: steadier on a busy machine), every run (``runs``), and the load average
at the start and end with the bench's own CPU seconds.
``--quick`` does 2 rounds (about 4 minutes on 2 busy cores), the default 5 (about 10).

``--master yarn`` (issue 34, Must 1) runs ScaleLab's kernel (``scalelab``, cold: its own YARN
application requested at its start) against the warm kernel (``warm``: the manager's, whose
application runs already) on the HDFS and YARN test cluster (``tests/support/hadoopcluster.py``:
one JVM, 2 NodeManagers of 4 GiB and 2 vcores, started by the script), with the settings a
spawner gives a YARN server (``spark_master = "yarn"``, 2 executors of 512m). Besides the
figures above it prints ``*_result_after_ready_median_s`` (from the kernel's ready, its
``kernel_info`` reply, to the first Spark result: the issue's measure) and, for a warm kernel
left unused with ``cluster_release_s`` of :data:`RELEASE_S`: ``idle_containers_held_ready``
(its application's running containers while it waits), ``idle_containers_after_release``
(after it was released: 0 means an idle student holds nothing) and ``release_to_freed_s``.

Usage: ``.venv/bin/python bench/kernel_start.py [--quick] [--master yarn]`` from the
repository root.
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
from pathlib import Path
from typing import Any

import psutil
from jupyter_client import BlockingKernelClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo, tree, tree_cpu_seconds, tree_peak_rss
from scalelab.hub_ext.server.warm_kernel import WarmKernelManager
from scalelab.kernels.specs import install_kernelspecs
from tests.support.hadoopcluster import (
    YARN_SPARK_CONF,
    HadoopTestCluster,
    yarn_server_environment,
)
from tests.support.kernelrun import Kernel

MASTER = "local[2]"
DRIVER_MEMORY = "1g"
PLAIN = "bench-plain-python"
SCALELAB = "scalelab-pyspark"
KERNELS = {"plain": PLAIN, "scalelab": SCALELAB, "warm": SCALELAB}
#: The Spark cell as a student writes it in a plain kernel, and in ScaleLab's (``spark`` given).
SPARK_CELL = {
    "plain": (
        "from pyspark.sql import SparkSession\n"
        f"spark = SparkSession.builder.master({MASTER!r})"
        f".config('spark.driver.memory', {DRIVER_MEMORY!r}).getOrCreate()\n"
        "spark.range(3).count()"
    ),
    "scalelab": "spark.range(3).count()",
    "warm": "spark.range(3).count()",
}
VARIANTS = [
    ("plain", "cell_first"),
    ("scalelab", "cell_first"),
    ("warm", "cell_first"),
    ("plain", "spark_first"),
    ("scalelab", "spark_first"),
    ("warm", "spark_first"),
]
#: On YARN: ScaleLab's kernel cold and warm (a plain kernel's session would be the cold one's).
YARN_VARIANTS = [v for v in VARIANTS if v[0] != "plain"]
#: Seconds the unused warm kernel on YARN waits before it is released, in the idle measure.
RELEASE_S = 20.0


def install(data_dir: Path) -> None:
    """ScaleLab's kernelspecs plus the plain ipykernel baseline's, in one Jupyter data folder."""
    install_kernelspecs(data_dir)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (plain ipykernel, same environment)",
        "language": "python",
        "interrupt_mode": "signal",
        "env": {},
        "metadata": {},
    }
    folder = data_dir / "kernels" / PLAIN
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))


def kernel_pid(kernel: Kernel) -> int:
    return kernel.km.provisioner.pid


class WarmKernel(Kernel):
    """A PySpark kernel taken from a :class:`WarmKernelManager` (a new one per run, its warm
    kernel started and waited for before the clock starts) on the bench's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cwd: str, **settings: Any):
        self.loop = loop
        self.cwd = cwd
        self.manager = WarmKernelManager(root_dir=cwd, rewarm_delay_s=3600, **settings)
        self.call(self._ready())
        self.took_warm = False

    def call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=600)

    async def _ready(self) -> None:
        self.manager.begin(pyspark_offered=True)
        while self.manager.status()["state"] != "ready":
            if self.manager.status()["state"] == "off":
                raise RuntimeError(f"no warm kernel: {self.manager.status()}")
            await asyncio.sleep(0.2)

    def __enter__(self) -> WarmKernel:
        self.started_at = time.monotonic()
        kernel_id = self.call(self.manager.start_kernel(kernel_name=SCALELAB, path=""))
        self.took_warm = self.manager.status()["taken"] == 1
        self.km = self.manager.get_kernel(kernel_id)
        self.kc = BlockingKernelClient()
        self.kc.load_connection_info(self.km.get_connection_info())
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=180)
        return self

    def close(self) -> None:
        """Stop the manager's kernels (a warm one never taken)."""
        self.call(self.manager.shutdown_all(now=True))

    def __exit__(self, *_exc: object) -> None:
        self.kc.stop_channels()
        self.close()


def one_start(
    kind: str, way: str, env: dict[str, str], cwd: str, loop: asyncio.AbstractEventLoop
) -> dict:
    """One fresh kernel of ``kind`` timed the ``way`` given; the kernel is shut down after."""
    run: dict = {}
    kernel = WarmKernel(loop, cwd) if kind == "warm" else Kernel(KERNELS[kind], env, cwd=cwd)
    start = time.monotonic()
    with kernel:
        run["ready_s"] = time.monotonic() - start  # the kernel_info reply came
        if way == "cell_first":
            reply = kernel.run("6 * 7")
            run["first_cell_s"] = time.monotonic() - start
            assert reply["result"] == "42", reply
        reply = kernel.run(SPARK_CELL[kind], timeout_s=600)
        run["spark_ready_s" if way == "cell_first" else "first_spark_s"] = time.monotonic() - start
        if way == "spark_first":
            run["result_after_ready_s"] = run["first_spark_s"] - run["ready_s"]
        assert reply["result"] == "3", reply
        pid = kernel_pid(kernel)
        procs = tree(pid)
        run["cpu_s"] = tree_cpu_seconds(pid)
        run["peak_rss_mib"] = tree_peak_rss(pid) / 2**20
        run["processes"] = len(procs)
    # The process group was killed; make sure no JVM of this run outlives it into the next.
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    if kind == "warm":
        run["took_warm"] = kernel.took_warm
    return run


def running_containers(cluster: HadoopTestCluster) -> int:
    """Containers YARN's ResourceManager counts for running applications, all users."""
    apps = (cluster.resourcemanager("apps?states=RUNNING,ACCEPTED")["apps"] or {}).get("app", [])
    return sum(max(0, app.get("runningContainers", 0)) for app in apps)


def idle_release(cluster: HadoopTestCluster, loop: asyncio.AbstractEventLoop, cwd: str) -> dict:
    """A warm kernel on YARN left unused: the containers it holds while ready, then after its
    release (``cluster_release_s`` = :data:`RELEASE_S`), and the seconds from the release to
    no container held."""
    warm = WarmKernel(loop, cwd, cluster_release_s=RELEASE_S)
    try:
        held = running_containers(cluster)
        while warm.manager.status()["state"] != "released":
            time.sleep(0.2)
        released = time.monotonic()
        while running_containers(cluster) and time.monotonic() - released < 120:
            time.sleep(0.5)
        return {
            "idle_containers_held_ready": held,
            "idle_containers_after_release": running_containers(cluster),
            "release_to_freed_s": round(time.monotonic() - released, 3),
            "release_s": RELEASE_S,
        }
    finally:
        warm.close()


def run_rounds(
    variants: list[tuple[str, str]],
    rounds: int,
    env: dict[str, str],
    tmp: str,
    loop: asyncio.AbstractEventLoop,
) -> tuple[dict[str, list[dict]], dict]:
    """``rounds`` of ``variants`` (kind, way), the order rotated by one each round, after one
    untimed start of the first kind with Spark (the page cache warmed): each variant's runs
    (``"<kind>_<way>"`` -> runs) and the untimed start's."""
    os.environ.update(env)  # the warm kernels' manager starts them with its environment
    warmup = one_start(variants[0][0], "spark_first", env, tmp, loop)
    runs: dict[str, list[dict]] = {f"{kind}_{way}": [] for kind, way in variants}
    for i in range(rounds):
        shift = i % len(variants)
        for kind, way in variants[shift:] + variants[:shift]:
            runs[f"{kind}_{way}"].append(one_start(kind, way, env, tmp, loop))
    return runs, warmup


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds instead of 5")
    parser.add_argument("--rounds", type=int, help="rounds of the four variants")
    parser.add_argument(
        "--master", choices=("local", "yarn"), default="local", help="local[2], or YARN"
    )
    args = parser.parse_args()
    info = RunInfo()
    rounds = args.rounds or (2 if args.quick else 5)
    if args.master == "yarn":
        print(json.dumps({**yarn_main(rounds), **info.figures()}))
        return
    with tempfile.TemporaryDirectory(prefix="scalelab-kernel-start-") as tmp:
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        runs, warmup = run_rounds(VARIANTS, rounds, base_environment(tmp), tmp, loop)
        loop.call_soon_threadsafe(loop.stop)

    def figure(kind: str, way: str, key: str) -> float | None:
        return median([r[key] for r in runs[f"{kind}_{way}"]])

    result: dict = {"benchmark": "kernel_start", "rounds": rounds}
    result["baseline"] = (
        "plain ipykernel in the same environment; SparkSession.builder.master(local[2])"
        ".config(spark.driver.memory, 1g).getOrCreate() in the Spark cell"
    )
    for kind in KERNELS:
        result[f"{kind}_first_cell_median_s"] = figure(kind, "cell_first", "first_cell_s")
        result[f"{kind}_first_spark_median_s"] = figure(kind, "spark_first", "first_spark_s")
        result[f"{kind}_spark_ready_median_s"] = figure(kind, "cell_first", "spark_ready_s")
    # ScaleLab's kernel against the plain one ("<name>_ratio"); the warm kernel against
    # ScaleLab's kernel started on request ("warm_<name>_ratio").
    for prefix, ours_kind, base_kind, name, way, key in (
        ("", "scalelab", "plain", "first_cell", "cell_first", "first_cell_s"),
        ("", "scalelab", "plain", "first_spark", "spark_first", "first_spark_s"),
        ("", "scalelab", "plain", "spark_ready", "cell_first", "spark_ready_s"),
        ("warm_", "warm", "scalelab", "first_spark", "spark_first", "first_spark_s"),
        ("warm_", "warm", "scalelab", "spark_ready", "cell_first", "spark_ready_s"),
    ):
        ours, base = figure(ours_kind, way, key), figure(base_kind, way, key)
        result[f"{prefix}{name}_ratio"] = round(ours / base, 3) if ours and base else None
        pairs = zip(runs[f"{ours_kind}_{way}"], runs[f"{base_kind}_{way}"], strict=True)
        result[f"{prefix}{name}_ratio_paired_median"] = median([o[key] / b[key] for o, b in pairs])
    result["warm_taken"] = sum(
        r["took_warm"] for way in ("cell_first", "spark_first") for r in runs[f"warm_{way}"]
    )
    result["warm_runs"] = 2 * rounds
    for kind, way in VARIANTS:
        result[f"{kind}_{way}_cpu_median_s"] = figure(kind, way, "cpu_s")
        result[f"{kind}_{way}_peak_rss_median_mib"] = round(figure(kind, way, "peak_rss_mib"), 1)
    result["warmup_s"] = round(warmup["first_spark_s"], 3)
    result["runs"] = {
        name: [{k: round(v, 3) for k, v in run.items()} for run in values]
        for name, values in runs.items()
    }
    result.update(info.figures())
    print(json.dumps(result))


def base_environment(tmp: str) -> dict[str, str]:
    """The kernels' environment as a server gives it, in the bench's folder ``tmp``."""
    data_dir = Path(tmp) / "share" / "jupyter"
    install(data_dir)
    (Path(tmp) / "store").mkdir()
    return {
        **os.environ,
        "JUPYTER_PATH": str(data_dir),
        "SCALELAB_STORE_URL": (Path(tmp) / "store").as_uri(),
        "SCALELAB_STORE_OPTIONS": "{}",
        "SCALELAB_SPARK_MASTER": MASTER,
        "SCALELAB_SPARK_DRIVER_MEMORY": DRIVER_MEMORY,
        "SCALELAB_GPUS": "",
        "SCALELAB_LOG_DIR": str(Path(tmp) / "logs"),
    }


def yarn_main(rounds: int) -> dict:
    """``--master yarn``: cold and warm kernels on the test cluster's YARN, then the idle
    release."""
    with tempfile.TemporaryDirectory(prefix="scalelab-kernel-start-yarn-") as tmp:
        cluster = HadoopTestCluster(Path(tmp) / "cluster", nodemanagers=2)
        started = time.monotonic()
        cluster.start()
        cluster_start_s = time.monotonic() - started
        try:
            env = {**base_environment(tmp), **yarn_server_environment(cluster, DRIVER_MEMORY)}
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True).start()
            runs, warmup = run_rounds(YARN_VARIANTS, rounds, env, tmp, loop)
            idle = idle_release(cluster, loop, tmp)
            loop.call_soon_threadsafe(loop.stop)
        finally:
            cluster.stop()

    def figure(name: str, key: str) -> float | None:
        return median([r[key] for r in runs[name] if key in r])

    result: dict = {"benchmark": "kernel_start", "master": "yarn", "rounds": rounds}
    result["settings"] = {"spark.driver.memory": DRIVER_MEMORY, **YARN_SPARK_CONF}
    for kind in ("scalelab", "warm"):
        result[f"{kind}_ready_median_s"] = figure(f"{kind}_spark_first", "ready_s")
        result[f"{kind}_first_spark_median_s"] = figure(f"{kind}_spark_first", "first_spark_s")
        result[f"{kind}_result_after_ready_median_s"] = figure(
            f"{kind}_spark_first", "result_after_ready_s"
        )
        result[f"{kind}_first_cell_median_s"] = figure(f"{kind}_cell_first", "first_cell_s")
        result[f"{kind}_spark_ready_median_s"] = figure(f"{kind}_cell_first", "spark_ready_s")
    for name, key in (("first_spark", "first_spark_s"), ("spark_ready", "spark_ready_s")):
        way = "spark_first" if name == "first_spark" else "cell_first"
        ours, base = figure(f"warm_{way}", key), figure(f"scalelab_{way}", key)
        result[f"warm_{name}_ratio"] = round(ours / base, 3) if ours and base else None
    result["warm_taken"] = sum(
        r["took_warm"] for way in ("cell_first", "spark_first") for r in runs[f"warm_{way}"]
    )
    result["warm_runs"] = 2 * rounds
    result.update(idle)
    result["cluster_start_s"] = round(cluster_start_s, 3)
    result["warmup_s"] = round(warmup["first_spark_s"], 3)
    result["runs"] = {
        name: [{k: round(v, 3) for k, v in run.items()} for run in values]
        for name, values in runs.items()
    }
    return result


if __name__ == "__main__":
    main()
