"""Time ``scalelab data fetch msd-full`` on a full-size synthetic YearPredictionMSD and show that it
streams: peak memory of the fetch stays far below the 430 MB of text it checks.

The real zip is out of reach from the development machines, so a stand-in of the same shape is
written first: 515,345 lines (the real entry's figure) of an integer year and 90 features with
up to 5 decimals, zipped like UCI's (deflate), in a mirror folder. Then the real command runs in
a child process against a fresh local store, and its peak resident memory (the child's own
``ru_maxrss``, read with ``wait4``: the kernel's counter, which no short run can miss) and CPU
seconds are measured. ``--quick`` uses a 1/10 stand-in and a small entry instead of the real
one (through the public fetch function, in the child too).

The baseline is what a user would write instead: ``pandas.read_csv`` of the zip (pandas opens
a one-member zip itself), the whole table in memory, no checks and no shards; it runs in a
child of its own on the same zip (``baseline_*``), skipped when the machine has not four times
the text free.

Prints one JSON object: ``rows``, ``text_mib`` (uncompressed), ``zip_mib``, ``fetch_s``,
``fetch_cpu_s``, ``text_mib_per_s``, ``peak_rss_mib`` (the fetching process), ``shards`` (per
split); ``baseline_s``, ``baseline_cpu_s``, ``baseline_peak_rss_mib``; the load average at
the start and end (``load_avg_at_start``, ``load_avg_at_end``, ``load_avg_1m_at_start``) and
the bench's own wall and CPU seconds (``bench_*``; writing the stand-in is most of them).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo, run_measured
from scalelab.store.datasets.catalog import MSD_FULL

_CHILD = r"""
import sys
from dataclasses import replace
from scalelab.store import fetch_dataset, open_store
from scalelab.store.datasets.catalog import MSD_FULL

rows, train, store, mirror = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
table = replace(MSD_FULL.table, rows=rows, splits=(("train", train), ("test", rows - train)))
fetch_dataset(replace(MSD_FULL, table=table), open_store(store), mirror=mirror, download=False)
"""

#: The baseline: what a notebook does without the fetch.
_PANDAS = r"""
import sys
import pandas as pd
frame = pd.read_csv(sys.argv[1], header=None)
assert len(frame) == int(sys.argv[2]), len(frame)
"""


def write_stand_in(mirror: Path, rows: int, seed: int = 0) -> tuple[int, int]:
    """Write ``mirror/msd_full/yearpredictionmsd.zip``; returns (text bytes, zip bytes)."""
    folder = mirror / MSD_FULL.mirror_dir
    folder.mkdir(parents=True)
    text = folder / MSD_FULL.table.member
    rng = np.random.default_rng(seed)
    with pacsv.CSVWriter(
        text,
        pa.schema([("year", pa.int16())] + [(f"f{i:02d}", pa.float64()) for i in range(1, 91)]),
        write_options=pacsv.WriteOptions(include_header=False, quoting_style="none"),
    ) as writer:
        for start in range(0, rows, 50_000):
            n = min(50_000, rows - start)
            columns = [pa.array(rng.integers(1922, 2012, n).astype(np.int16))]
            columns += [pa.array(rng.normal(0, 50, n).round(5)) for _ in range(90)]
            writer.write_batch(
                pa.record_batch(columns, names=["year", *MSD_FULL.table.feature_names])
            )
    target = folder / MSD_FULL.files[0].name
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.write(text, arcname=MSD_FULL.table.member)
    size = text.stat().st_size
    text.unlink()
    return size, target.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 1/10 stand-in, small entry")
    args = parser.parse_args()
    info = RunInfo()
    rows = MSD_FULL.table.rows // 10 if args.quick else MSD_FULL.table.rows
    with tempfile.TemporaryDirectory(prefix="msd-bench-") as tmp:
        mirror, store = Path(tmp) / "mirror", (Path(tmp) / "store").as_uri()
        text_bytes, zip_bytes = write_stand_in(mirror, rows)
        if args.quick:
            command = [sys.executable, "-c", _CHILD, str(rows), str(rows * 9 // 10), store]
            command.append(str(mirror))
        else:
            command = [sys.executable, "-c", "import sys; from scalelab.cli import main; "]
            command[-1] += "sys.exit(main())"
            command += ["data", "fetch", "msd-full"]
            command += ["--mirror", str(mirror), "--store", store, "--no-download"]
        fetch = run_measured(command)
        parquet = Path(tmp) / "store" / "datasets" / "msd-full" / "parquet"
        shards = {split.name: len(list(split.iterdir())) for split in sorted(parquet.iterdir())}
        result = {
            "rows": rows,
            "text_mib": round(text_bytes / 2**20, 1),
            "zip_mib": round(zip_bytes / 2**20, 1),
            "fetch_s": round(fetch.wall_s, 2),
            "fetch_cpu_s": round(fetch.cpu_s, 2),
            "text_mib_per_s": round(text_bytes / 2**20 / fetch.wall_s, 1),
            "peak_rss_mib": round(fetch.peak_rss / 2**20, 1),
            "shards": shards,
            "baseline": "pandas.read_csv of the zip, the whole table in memory",
        }
        need = 4 * text_bytes + 2**30
        if psutil.virtual_memory().available > need:
            archive = mirror / MSD_FULL.mirror_dir / MSD_FULL.files[0].name
            base = run_measured([sys.executable, "-c", _PANDAS, str(archive), str(rows)])
            result["baseline_s"] = round(base.wall_s, 2)
            result["baseline_cpu_s"] = round(base.cpu_s, 2)
            result["baseline_peak_rss_mib"] = round(base.peak_rss / 2**20, 1)
        else:
            result["baseline_skipped"] = f"needs about {need / 2**20:.0f} MiB free"
    result.update(info.figures())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
