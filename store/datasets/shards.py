"""Converting the original data set files into the Parquet shards the labs read.

Fashion-MNIST's IDX files become ``fashion-mnist/parquet/{train,test}/`` (``image``
``fixed_size_binary[784]``, ``label`` uint8); ``millionsong.txt`` becomes
``millionsong/parquet/`` (``year``, ``f01..f12`` float64 scaled to [0, 1]).
Why: docs/design-notes.md, scalelab.store.datasets.shards.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: Rows per Parquet shard of Fashion-MNIST (60,000 train rows -> 6 shards, 10,000 test -> 1).
FASHION_ROWS_PER_SHARD = 10_000
#: Pixels per Fashion-MNIST image (28 x 28).
IMAGE_PIXELS = 28 * 28
#: Number of audio features per Million Song row.
MILLIONSONG_FEATURES = 12

_IDX_MAGIC = {1: 0x00000801, 3: 0x00000803}


def read_idx(path: str | Path) -> np.ndarray:
    """Read a gzip-compressed IDX file.

    Parameters
    ----------
    path
        ``*-idx1-ubyte.gz`` (labels) or ``*-idx3-ubyte.gz`` (images).

    Returns
    -------
    numpy.ndarray
        uint8, shape ``(n,)`` for labels or ``(n, rows, cols)`` for images.

    Raises
    ------
    ValueError
        The magic number or the length does not match the IDX header.
    """
    data = gzip.decompress(Path(path).read_bytes())
    ndim = data[3]
    magic = int.from_bytes(data[:4], "big")
    if _IDX_MAGIC.get(ndim) != magic:
        raise ValueError(f"{path}: not an IDX file of uint8 (magic {magic:#010x})")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims))
    if len(data) - offset != expected:
        raise ValueError(
            f"{path}: header says {expected} bytes of data, file has {len(data) - offset}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def fashion_mnist_table(images: np.ndarray, labels: np.ndarray) -> pa.Table:
    """Build the Parquet table of Fashion-MNIST rows.

    Parameters
    ----------
    images
        uint8, shape ``(n, 28, 28)``.
    labels
        uint8, shape ``(n,)``.

    Returns
    -------
    pyarrow.Table
        ``n`` rows; columns ``image`` (fixed_size_binary[784]) and ``label`` (uint8).
    """
    n = len(labels)
    if images.shape != (n, 28, 28):
        raise ValueError(f"images have shape {images.shape}, expected ({n}, 28, 28)")
    flat = np.ascontiguousarray(images, dtype=np.uint8)
    image_col = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(IMAGE_PIXELS), n, [None, pa.py_buffer(flat.tobytes())]
    )
    return pa.table({"image": image_col, "label": pa.array(labels, type=pa.uint8())})


def millionsong_table(path: str | Path) -> pa.Table:
    """Parse ``millionsong.txt`` (CSV: year, 12 features) into a table.

    Returns
    -------
    pyarrow.Table
        Columns ``year`` and ``f01`` .. ``f12``, all float64; one row per line.

    Raises
    ------
    ValueError
        A line does not have 13 numeric fields.
    """
    rows = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    if rows.shape[1] != MILLIONSONG_FEATURES + 1:
        raise ValueError(
            f"{path}: {rows.shape[1]} fields a line, expected {MILLIONSONG_FEATURES + 1}"
        )
    columns = {"year": rows[:, 0]}
    columns.update({f"f{i:02d}": rows[:, i] for i in range(1, MILLIONSONG_FEATURES + 1)})
    return pa.table(columns)


def write_shards(table: pa.Table, out_dir: Path, rows_per_shard: int) -> list[Path]:
    """Write ``table`` as Parquet shards ``part-00000.parquet``, ``part-00001.parquet`` ...

    Returns
    -------
    list of Path
        The shards written, in order; each holds at most ``rows_per_shard`` rows.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, start in enumerate(range(0, max(table.num_rows, 1), rows_per_shard)):
        shard = out_dir / f"part-{index:05d}.parquet"
        pq.write_table(table.slice(start, rows_per_shard), shard)
        written.append(shard)
    return written


def convert_fashion_mnist(raw_dir: Path, out_dir: Path) -> dict[str, int]:
    """Write ``out_dir/parquet/{train,test}/`` shards from the four IDX files in ``raw_dir``.

    Returns
    -------
    dict
        Rows written per split: ``{"train": 60000, "test": 10000}`` for the real data set.
    """
    rows = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(raw_dir / f"{prefix}-images-idx3-ubyte.gz")
        labels = read_idx(raw_dir / f"{prefix}-labels-idx1-ubyte.gz")
        table = fashion_mnist_table(images, labels)
        write_shards(table, out_dir / "parquet" / split, FASHION_ROWS_PER_SHARD)
        rows[split] = table.num_rows
    return rows


def convert_millionsong(raw_dir: Path, out_dir: Path) -> dict[str, int]:
    """Write ``out_dir/parquet/part-00000.parquet`` from ``raw_dir/millionsong.txt``.

    Returns
    -------
    dict
        ``{"all": 6724}`` for the course's subset.
    """
    table = millionsong_table(raw_dir / "millionsong.txt")
    write_shards(table, out_dir / "parquet", rows_per_shard=max(table.num_rows, 1))
    return {"all": table.num_rows}


#: Converter of each data set, by name: ``(raw_dir, out_dir) -> rows per split``.
CONVERTERS = {"fashion-mnist": convert_fashion_mnist, "millionsong": convert_millionsong}


def iter_files(root: Path) -> Iterator[Path]:
    """Every file under ``root``, sorted, as paths relative to ``root``."""
    return (p.relative_to(root) for p in sorted(root.rglob("*")) if p.is_file())
