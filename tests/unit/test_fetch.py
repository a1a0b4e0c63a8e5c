"""``scalelab data fetch`` from a mirror (the real data in ../shared/data): checksums, refusal of a
corrupt file with nothing half-written, Debian's re-headered gzip files, and idempotent re-runs."""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scalelab.common.diskspace import format_bytes
from scalelab.store import (
    ChecksumError,
    DataSourceError,
    fetch_dataset,
    missing_datasets,
    open_store,
)
from scalelab.store.datasets.catalog import FASHION_MNIST, MILLIONSONG
from scalelab.store.errors import StoreFullError, StoreUnavailableError, store_failure
from tests.unit.test_diskspace import tmpfs


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_fetch_from_mirror_writes_originals_shards_and_manifest(tmp_path: Path, shared_data: Path):
    fs = open_store((tmp_path / "store").as_uri())
    assert missing_datasets(fs) == ["fashion-mnist", "millionsong"]
    lines: list[str] = []
    assert fetch_dataset(MILLIONSONG, fs, mirror=shared_data, log=lines.append, download=False)
    assert any("millionsong.txt: verified (from the mirror)" in line for line in lines)

    root = tmp_path / "store" / "datasets" / "millionsong"
    assert (root / "raw" / "millionsong.txt").read_bytes() == (
        shared_data / "millionsong" / "millionsong.txt"
    ).read_bytes()
    table = pq.read_table(root / "parquet")
    assert table.num_rows == 6724
    assert table.column_names == ["year", *[f"f{i:02d}" for i in range(1, 13)]]
    assert sum(table.column("f03").to_pylist()) == pytest.approx(3158.96224351, abs=1e-6)
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["rows"] == {"all": 6724}
    assert manifest["files"]["raw/millionsong.txt"] == MILLIONSONG.files[0].sha256
    assert missing_datasets(fs) == ["fashion-mnist"]
    assert not (tmp_path / "store" / "datasets" / ".staging").exists()


def test_fashion_mnist_shards_hold_every_image_and_label(course_store: str):
    fs = open_store(course_store)
    train = pq.read_table("datasets/fashion-mnist/parquet/train", filesystem=fs)
    test = pq.read_table("datasets/fashion-mnist/parquet/test", filesystem=fs)
    assert (train.num_rows, test.num_rows) == (60000, 10000)
    assert len(fs.ls("datasets/fashion-mnist/parquet/train")) == 6
    assert train.schema.field("image").type.byte_width == 784
    counts = train.column("label").value_counts().to_pylist()
    assert sorted(c["counts"] for c in counts) == [6000] * 10
    pixels = b"".join(test.column("image").to_pylist())
    assert sum(pixels) / len(pixels) == pytest.approx(73.15, abs=0.01)  # the README's pixel mean


def test_rerun_does_nothing(tmp_path: Path, shared_data: Path):
    fs = open_store((tmp_path / "store").as_uri())
    assert fetch_dataset(MILLIONSONG, fs, mirror=shared_data, log=lambda _: None, download=False)
    before = _tree(tmp_path / "store")
    lines: list[str] = []
    assert not fetch_dataset(MILLIONSONG, fs, mirror=shared_data, log=lines.append, download=False)
    assert lines == ["millionsong: already in the store at datasets/millionsong/, nothing to do"]
    assert _tree(tmp_path / "store") == before


@pytest.fixture
def mirror(tmp_path: Path, shared_data: Path) -> Path:
    """A writable copy of the shared mirror, to corrupt."""
    copy = tmp_path / "mirror"
    shutil.copytree(shared_data, copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return copy


def test_corrupt_mirror_file_is_refused_by_name_and_nothing_is_written(
    tmp_path: Path, mirror: Path
):
    target = mirror / "millionsong" / "millionsong.txt"
    data = bytearray(target.read_bytes())
    data[100] ^= 0x01  # one flipped bit
    target.write_bytes(bytes(data))
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(ChecksumError) as info:
        fetch_dataset(MILLIONSONG, fs, mirror=mirror, log=lambda _: None, download=False)
    message = str(info.value)
    assert "millionsong/millionsong.txt" in message
    assert "from the mirror" in message
    assert MILLIONSONG.files[0].sha256 in message
    assert "Nothing was written to the store" in message
    assert list((tmp_path / "store").rglob("*")) == []


def test_corrupt_gzip_is_refused_even_after_good_files(tmp_path: Path, mirror: Path):
    target = mirror / "fashion_mnist" / "t10k-labels-idx1-ubyte.gz"
    target.write_bytes(target.read_bytes()[:-100])  # truncated download
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(
        ChecksumError, match=r"t10k-labels-idx1-ubyte\.gz.*not a readable gzip file"
    ):
        fetch_dataset(FASHION_MNIST, fs, mirror=mirror, log=lambda _: None, download=False)
    assert not fs.exists("datasets/fashion-mnist")
    assert not fs.exists("datasets/.staging")


def test_debian_style_gzip_headers_pass_on_their_decompressed_bytes(tmp_path: Path, mirror: Path):
    # Debian's dataset-fashion-mnist rewrites the gzip header (no file name, another mtime).
    for path in (mirror / "fashion_mnist").glob("*.gz"):
        raw = gzip.decompress(path.read_bytes())
        path.write_bytes(gzip.compress(raw, compresslevel=1, mtime=0))  # level: CPU only
    fs = open_store((tmp_path / "store").as_uri())
    assert fetch_dataset(FASHION_MNIST, fs, mirror=mirror, log=lambda _: None, download=False)
    assert missing_datasets(fs) == ["millionsong"]


def test_missing_everywhere_lists_every_source_tried(tmp_path: Path, mirror: Path):
    (mirror / "millionsong" / "millionsong.txt").unlink()
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(DataSourceError) as info:
        fetch_dataset(MILLIONSONG, fs, mirror=mirror, log=lambda _: None, download=False)
    message = str(info.value)
    assert f"mirror: no file at {mirror}/millionsong/millionsong.txt" in message
    assert "upstream: not tried (--no-download)" in message
    assert list((tmp_path / "store").rglob("*")) == []


def test_stale_staging_of_a_killed_fetch_is_cleaned(tmp_path: Path, shared_data: Path):
    fs = open_store((tmp_path / "store").as_uri())
    fs.makedirs("datasets/.staging/millionsong-deadbeef/raw")
    fs.pipe_file("datasets/.staging/millionsong-deadbeef/raw/millionsong.txt", b"half")
    fetch_dataset(MILLIONSONG, fs, mirror=shared_data, log=lambda _: None, download=False)
    assert not fs.exists("datasets/.staging")


def test_bytes_flipped_inside_a_gzip_stream_are_refused_not_a_crash(tmp_path: Path, mirror: Path):
    # Regression: a corrupt deflate stream raised zlib.error through the CLI as a traceback.
    target = mirror / "fashion_mnist" / "t10k-labels-idx1-ubyte.gz"
    data = bytearray(target.read_bytes())
    data[2000] ^= 0xFF
    data[2001] ^= 0xFF
    target.write_bytes(bytes(data))
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(
        ChecksumError, match=r"t10k-labels-idx1-ubyte\.gz.*not a readable gzip file"
    ):
        fetch_dataset(FASHION_MNIST, fs, mirror=mirror, log=lambda _: None, download=False)
    assert list((tmp_path / "store").rglob("*")) == []


def _fetch_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``scalelab data fetch millionsong`` from the shared mirror, as a user runs it."""
    command = [sys.executable, "-m", "scalelab", "data", "fetch", "millionsong", "--no-download"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_a_full_store_disk_names_the_disk_and_what_the_fetch_needs(
    tmp_path: Path, shared_data: Path
):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        store = disk / "course"
        result = _fetch_cli("--mirror", str(shared_data), "--store", str(store))
        error = result.stderr.strip()
        assert result.returncode == 1, result.stderr
        assert "\n" not in error and "Traceback" not in error
        assert error.startswith(
            f"scalelab: error: fetching millionsong stopped: The disk holding "
            f"{store}/datasets/millionsong (mount {disk}, "
        )
        assert "Free space there" in error and "cannot be read" not in error
        assert [p.name for p in store.rglob("*")] == ["datasets"]  # no staging, no half data set
        assert missing_datasets(open_store(str(store))) == ["fashion-mnist", "millionsong"]
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        rerun = _fetch_cli("--mirror", str(shared_data), "--store", str(store))
        assert rerun.returncode == 0, rerun.stderr
        assert missing_datasets(open_store(str(store))) == ["fashion-mnist"]
        needed = sum(p.stat().st_size for p in (store / "datasets").rglob("*") if p.is_file())
    # What the fetch said it needs is what the data set took once there was room.
    free = 1024**2  # the empty 1 MiB tmpfs
    more, total = format_bytes(needed - free), format_bytes(needed)
    told = f"is full: this needs {more} more ({total} in all)."
    assert told in error, error


def test_a_full_staging_disk_is_named_not_blamed_on_the_sources(tmp_path: Path, shared_data: Path):
    store = tmp_path / "store"
    with tmpfs(tmp_path / "tmp", "256k") as staging:
        result = _fetch_cli(
            "--mirror",
            str(shared_data),
            "--store",
            str(store),
            env={**os.environ, "TMPDIR": str(staging)},
        )
        assert list(staging.iterdir()) == []
    error = result.stderr.strip()
    assert result.returncode == 1, result.stderr
    assert "\n" not in error and "Traceback" not in error
    assert "fetching millionsong stopped before the store: The disk holding " in error
    assert f"{staging}/scalelab-millionsong-" in error and f"(mount {staging}, " in error
    assert "its originals are 1.2 MiB, plus their Parquet shards" in error
    assert "set TMPDIR to a folder on a bigger disk. Nothing was written to the store." in error
    assert "no source could deliver" not in error
    assert missing_datasets(open_store(str(store))) == ["fashion-mnist", "millionsong"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_no_full_disk_is_reported_as_an_unreadable_store(tmp_path: Path, code: int):
    # Any store call: the destination named by the OSError is the disk told.
    target = tmp_path / "store" / "datasets" / "x.parquet"
    exc = OSError(code, os.strerror(code), str(tmp_path / "source"), None, str(target))
    failure = store_failure(tmp_path.as_uri(), exc)
    assert isinstance(failure, StoreFullError)
    assert "cannot be read" not in str(failure) and "reachable" not in str(failure)
    assert f"The disk holding {target} (mount " in str(failure)
    remote = store_failure("s3://bucket/course", RuntimeError("upload"))
    assert isinstance(remote, StoreUnavailableError)  # not a full disk: unchanged
