"""Benchmark: ``scalelab data fetch`` of both course data sets from a mirror, against a plain copy.

The baseline is what a user would do instead: a plain copy of the mirror's files (``cp -r``,
here ``shutil.copytree``), with no checksum and no conversion.

Prints one JSON object:

- ``fetch_s``: seconds for :func:`scalelab.store.fetch_dataset` of fashion-mnist and millionsong
  into an empty local store (copy, SHA-256 of every file and of the decompressed gzip bytes,
  Parquet shards, manifest);
- ``copy_s``: seconds for ``shutil.copytree`` of the same original files (the baseline);
- ``ratio``: ``fetch_s / copy_s``, the price of checking and converting;
- ``fetch_cpu_s``, ``copy_cpu_s``, ``rerun_cpu_s``: CPU seconds (user + system, this process's
  threads and any children) of each, steadier than wall time on a busy machine, and
  ``cpu_ratio`` (``fetch_cpu_s / copy_cpu_s``);
- ``rerun_s``: seconds for a second fetch, which finds both data sets present and does nothing;
- ``source_mib``: MiB of original files;
- the load average at the start and end (``load_avg_at_start``, ``load_avg_at_end``,
  ``load_avg_1m_at_start``) and the bench's own wall and CPU seconds (``bench_*``).

Usage: ``.venv/bin/python bench/data_fetch.py [--mirror ../shared/data] [--repeat 3]``; the
figures are the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from scalelab.store import DATASETS, fetch_dataset, open_store

REPO = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    """CPU seconds of this process (every thread) and its waited-for children, to the µs."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _timed(fn, cpu: list[float]) -> float:
    """Wall seconds of ``fn()``; its CPU seconds are appended to ``cpu``."""
    cpu0 = _cpu()
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    cpu.append(_cpu() - cpu0)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    info = RunInfo()
    folders = [args.mirror / spec.mirror_dir for spec in DATASETS.values()]
    fetch, copy, rerun = [], [], []
    fetch_cpu, copy_cpu, rerun_cpu = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            fs = open_store((Path(tmp) / "store").as_uri())

            def fetch_all(fs=fs) -> None:
                for spec in DATASETS.values():
                    fetch_dataset(spec, fs, mirror=args.mirror, log=lambda _: None, download=False)

            fetch.append(_timed(fetch_all, fetch_cpu))
            rerun.append(_timed(fetch_all, rerun_cpu))
            copy.append(
                _timed(
                    lambda tmp=tmp: [
                        shutil.copytree(f, Path(tmp) / "copy" / f.name) for f in folders
                    ],
                    copy_cpu,
                )
            )
    size = sum(p.stat().st_size for f in folders for p in f.iterdir())
    fetch_s, copy_s = statistics.median(fetch), statistics.median(copy)
    fetch_cpu_s, copy_cpu_s = statistics.median(fetch_cpu), statistics.median(copy_cpu)
    print(
        json.dumps(
            {
                "fetch_s": round(fetch_s, 3),
                "copy_s": round(copy_s, 4),
                "ratio": round(fetch_s / copy_s, 1),
                "fetch_cpu_s": round(fetch_cpu_s, 3),
                "copy_cpu_s": round(copy_cpu_s, 4),
                "cpu_ratio": round(fetch_cpu_s / copy_cpu_s, 1) if copy_cpu_s else None,
                "rerun_s": round(statistics.median(rerun), 4),
                "rerun_cpu_s": round(statistics.median(rerun_cpu), 4),
                "source_mib": round(size / 2**20, 1),
                "repeat": args.repeat,
                "baseline": "a plain copy of the same files (shutil.copytree, as cp -r)",
                **info.figures(),
            }
        )
    )


if __name__ == "__main__":
    main()
