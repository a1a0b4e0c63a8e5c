"""Benchmark: ``scalelab data fetch`` of both course data sets from a mirror, against a plain copy.

Prints one JSON object:

- ``fetch_s``: seconds for :func:`scalelab.store.fetch_dataset` of fashion-mnist and millionsong
  into an empty local store (copy, SHA-256 of every file and of the decompressed gzip bytes,
  Parquet shards, manifest);
- ``copy_s``: seconds for ``shutil.copytree`` of the same original files (the baseline);
- ``ratio``: ``fetch_s / copy_s``, the price of checking and converting;
- ``rerun_s``: seconds for a second fetch, which finds both data sets present and does nothing;
- ``source_mib``: MiB of original files.

Usage: ``.venv/bin/python bench/data_fetch.py [--mirror ../shared/data] [--repeat 3]``; the
figures are the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from scalelab.store import DATASETS, fetch_dataset, open_store

REPO = Path(__file__).resolve().parents[1]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folders = [args.mirror / spec.mirror_dir for spec in DATASETS.values()]
    fetch, copy, rerun = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            fs = open_store((Path(tmp) / "store").as_uri())

            def fetch_all(fs=fs) -> None:
                for spec in DATASETS.values():
                    fetch_dataset(spec, fs, mirror=args.mirror, log=lambda _: None, download=False)

            fetch.append(_timed(fetch_all))
            rerun.append(_timed(fetch_all))
            copy.append(
                _timed(
                    lambda tmp=tmp: [
                        shutil.copytree(f, Path(tmp) / "copy" / f.name) for f in folders
                    ]
                )
            )
    size = sum(p.stat().st_size for f in folders for p in f.iterdir())
    fetch_s, copy_s = statistics.median(fetch), statistics.median(copy)
    print(
        json.dumps(
            {
                "fetch_s": round(fetch_s, 3),
                "copy_s": round(copy_s, 4),
                "ratio": round(fetch_s / copy_s, 1),
                "rerun_s": round(statistics.median(rerun), 4),
                "source_mib": round(size / 2**20, 1),
                "repeat": args.repeat,
            }
        )
    )


if __name__ == "__main__":
    main()
