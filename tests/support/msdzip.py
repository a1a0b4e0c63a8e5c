"""Synthetic YearPredictionMSD zips (the real one is 211 MB and out of reach here) and a small
catalogue entry for them, built from the real ``msd-full`` entry: same names and rules, few rows."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from scalelab.store import DatasetSpec
from scalelab.store.datasets.catalog import MSD_FULL

MEMBER = MSD_FULL.table.member  # YearPredictionMSD.txt


def synthetic_rows(n: int = 30, seed: int = 0) -> np.ndarray:
    """``n`` rows of YearPredictionMSD's shape: an integer year in 1922..2011, 90 features."""
    rng = np.random.default_rng(seed)
    years = rng.integers(1922, 2012, size=(n, 1)).astype(np.float64)
    return np.hstack([years, rng.normal(0, 50, size=(n, 90)).round(5)])


def csv_lines(rows: np.ndarray) -> list[str]:
    """The rows as UCI writes them: year as an integer, then the features, comma-separated."""
    return [f"{int(r[0])}," + ",".join(repr(float(v)) for v in r[1:]) for r in rows]


def write_zip(path: Path, lines: list[str], member: str = MEMBER) -> Path:
    """A zip at ``path`` holding ``member``: the lines, each ended by a newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, "\n".join(lines) + "\n")
    return path


def small_entry(
    upstream: str = "http://127.0.0.1:9/unreachable",
    urls: tuple[str, ...] = (),
    splits: tuple[tuple[str, int], ...] = (("train", 24), ("test", 6)),
    rows_per_shard: int = 10,
) -> DatasetSpec:
    """The real msd-full entry with the rows of ``splits`` and small shards."""
    table = replace(
        MSD_FULL.table,
        rows=sum(count for _split, count in splits),
        splits=splits,
        rows_per_shard=rows_per_shard,
    )
    files = (replace(MSD_FULL.files[0], urls=urls),)
    return replace(MSD_FULL, upstream=upstream, files=files, table=table)
