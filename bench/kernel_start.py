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

Usage: ``.venv/bin/python bench/kernel_start.py [--quick]`` from the repository root.
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

    def __init__(self, loop: asyncio.AbstractEventLoop, cwd: str):
        self.loop = loop
        self.cwd = cwd
        self.manager = WarmKernelManager(root_dir=cwd, rewarm_delay_s=3600)
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

    def __exit__(self, *_exc: object) -> None:
        self.kc.stop_channels()
        self.call(self.manager.shutdown_all(now=True))


def one_start(
    kind: str, way: str, env: dict[str, str], cwd: str, loop: asyncio.AbstractEventLoop
) -> dict:
    """One fresh kernel of ``kind`` timed the ``way`` given; the kernel is shut down after."""
    run: dict = {}
    kernel = WarmKernel(loop, cwd) if kind == "warm" else Kernel(KERNELS[kind], env, cwd=cwd)
    start = time.monotonic()
    with kernel:
        if way == "cell_first":
            reply = kernel.run("6 * 7")
            run["first_cell_s"] = time.monotonic() - start
            assert reply["result"] == "42", reply
        reply = kernel.run(SPARK_CELL[kind])
        run["spark_ready_s" if way == "cell_first" else "first_spark_s"] = time.monotonic() - start
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


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds instead of 5")
    parser.add_argument("--rounds", type=int, help="rounds of the four variants")
    args = parser.parse_args()
    info = RunInfo()
    rounds = args.rounds or (2 if args.quick else 5)
    runs: dict[str, list[dict]] = {f"{kind}_{way}": [] for kind, way in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="scalelab-kernel-start-") as tmp:
        data_dir = Path(tmp) / "share" / "jupyter"
        install(data_dir)
        (Path(tmp) / "store").mkdir()
        env = {
            **os.environ,
            "JUPYTER_PATH": str(data_dir),
            "SCALELAB_STORE_URL": (Path(tmp) / "store").as_uri(),
            "SCALELAB_STORE_OPTIONS": "{}",
            "SCALELAB_SPARK_MASTER": MASTER,
            "SCALELAB_SPARK_DRIVER_MEMORY": DRIVER_MEMORY,
            "SCALELAB_GPUS": "",
            "SCALELAB_LOG_DIR": str(Path(tmp) / "logs"),
        }
        os.environ.update(env)  # the warm kernels' manager starts them with its environment
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        warmup = one_start("plain", "spark_first", env, tmp, loop)
        for i in range(rounds):
            shift = i % len(VARIANTS)
            for kind, way in VARIANTS[shift:] + VARIANTS[:shift]:
                runs[f"{kind}_{way}"].append(one_start(kind, way, env, tmp, loop))
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


if __name__ == "__main__":
    main()
