"""``scalelab data fetch`` straight into an S3 course store: SeaweedFS on loopback, through s3fs.

Object stores have no atomic rename, so a data set is published by writing its final objects and
its ``MANIFEST.json`` last; a folder without the manifest is incomplete to readers and re-runs.
The upstream address is a real HTTP server over the shared data (``tests/support/httpstore.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fsspec.implementations.dirfs import DirFileSystem

from scalelab.store import ChecksumError, fetch_dataset, missing_datasets, open_store
from scalelab.store.datasets.catalog import FASHION_MNIST, MILLIONSONG
from scalelab.store.datasets.fetch import MANIFEST, is_present, renames_atomically
from tests.support.httpstore import http_folder
from tests.support.interrupts import interrupt_at_upload
from tests.support.seaweed import ADMIN, SeaweedS3


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed-fetch"), {})
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def store(s3: SeaweedS3) -> DirFileSystem:
    """A new, empty course store ``s3://<bucket>`` for one test, opened with ops' keys."""
    bucket = f"course-{uuid.uuid4().hex[:8]}"
    fs = open_store(f"s3://{bucket}", s3.options(*ADMIN))
    fs.fs.mkdir(bucket)
    return fs


@pytest.fixture(scope="module")
def upstream(shared_data: Path) -> Iterator[str]:
    """The shared data served over HTTP: an upstream address for ``download=True``."""
    with http_folder(shared_data) as url:
        yield url


def _objects(fs: DirFileSystem) -> dict[str, str]:
    """Every object of the store with its ETag (changes when an object is written again)."""
    return {path: info["ETag"] for path, info in fs.find("", detail=True).items()}


def test_fetch_into_s3_downloads_publishes_and_a_rerun_does_nothing(
    store: DirFileSystem, upstream: str
):
    assert not renames_atomically(store)
    spec = dataclasses.replace(MILLIONSONG, upstream=f"{upstream}/millionsong")
    lines: list[str] = []
    assert fetch_dataset(spec, store, log=lines.append)
    assert "  millionsong.txt: verified (from the upstream)" in lines
    assert is_present(store, MILLIONSONG)
    assert missing_datasets(store) == ["fashion-mnist"]
    assert sorted(_objects(store)) == [
        "datasets/millionsong/MANIFEST.json",
        "datasets/millionsong/parquet/part-00000.parquet",
        "datasets/millionsong/raw/millionsong.txt",
    ]  # no staging prefix left behind
    manifest = json.loads(store.cat_file(f"datasets/millionsong/{MANIFEST}"))
    assert manifest["rows"] == {"all": 6724}
    assert manifest["files"]["raw/millionsong.txt"] == MILLIONSONG.files[0].sha256
    table = pq.read_table("datasets/millionsong/parquet", filesystem=store)
    assert table.num_rows == 6724

    before = _objects(store)
    lines.clear()
    assert not fetch_dataset(spec, store, log=lines.append)
    assert lines == ["millionsong: already in the store at datasets/millionsong/, nothing to do"]
    assert _objects(store) == before


def test_corrupt_mirror_file_after_good_ones_writes_nothing(
    store: DirFileSystem, tmp_path: Path, shared_data: Path
):
    mirror = tmp_path / "mirror"
    shutil.copytree(shared_data / "fashion_mnist", mirror / "fashion_mnist")
    last = mirror / "fashion_mnist" / FASHION_MNIST.files[-1].name
    last.chmod(0o644)
    last.write_bytes(last.read_bytes()[:-100])  # a truncated copy, after three good files
    with pytest.raises(ChecksumError, match=FASHION_MNIST.files[-1].name):
        fetch_dataset(FASHION_MNIST, store, mirror=mirror, log=lambda _: None, download=False)
    assert _objects(store) == {}


def test_upload_interrupted_midway_leaves_nothing_taken_for_complete(
    store: DirFileSystem, shared_data: Path, monkeypatch: pytest.MonkeyPatch
):
    """Ctrl-C after the first object is up (simulated: the store's second upload raises
    KeyboardInterrupt); then a re-run completes the data set."""
    real_put_file = store.put_file
    uploads = interrupt_at_upload(store, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        fetch_dataset(MILLIONSONG, store, mirror=shared_data, log=lambda _: None, download=False)
    assert uploads[0].startswith("datasets/millionsong/")  # the first object was written in place
    assert not store.exists(f"datasets/millionsong/{MANIFEST}")
    assert not is_present(store, MILLIONSONG)
    assert missing_datasets(store) == ["fashion-mnist", "millionsong"]
    assert _objects(store) == {}  # what was written is removed again, folders too:
    assert not store.exists("datasets/millionsong")

    monkeypatch.setattr(store, "put_file", real_put_file)
    assert fetch_dataset(MILLIONSONG, store, mirror=shared_data, log=lambda _: None)
    assert is_present(store, MILLIONSONG)


def test_leftovers_of_a_killed_fetch_are_incomplete_and_cleaned_by_the_next(
    store: DirFileSystem, shared_data: Path
):
    """A fetch killed outright cleans nothing: half its objects and an old-style staging prefix
    stay. Readers take none of it for the data set; the next fetch removes it and starts over."""
    store.pipe_file("datasets/millionsong/raw/millionsong.txt", b"the first half")
    store.pipe_file("datasets/.staging/millionsong-deadbeef/raw/millionsong.txt", b"half")
    assert not is_present(store, MILLIONSONG)
    assert missing_datasets(store) == ["fashion-mnist", "millionsong"]

    lines: list[str] = []
    assert fetch_dataset(MILLIONSONG, store, mirror=shared_data, log=lines.append)
    assert any("datasets/millionsong/ has no MANIFEST.json" in line for line in lines)
    assert any(
        ".staging/millionsong-deadbeef/, left by an interrupted fetch" in line for line in lines
    )
    assert store.ls("datasets", detail=False) == ["datasets/millionsong"]  # no .staging folder
    assert is_present(store, MILLIONSONG)
    raw = store.cat_file("datasets/millionsong/raw/millionsong.txt")
    assert raw == (shared_data / "millionsong" / "millionsong.txt").read_bytes()


def test_an_older_layout_loses_its_manifest_before_it_is_rewritten(
    store: DirFileSystem, shared_data: Path, monkeypatch: pytest.MonkeyPatch
):
    old = dataclasses.replace(MILLIONSONG, layout_version=0)
    assert fetch_dataset(old, store, mirror=shared_data, log=lambda _: None, download=False)
    assert not is_present(store, MILLIONSONG)

    def interrupted(*_args, **_kwargs) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "put_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch_dataset(MILLIONSONG, store, mirror=shared_data, log=lambda _: None, download=False)
    # The old version's manifest went first: nothing claims to be either version now.
    assert not store.exists(f"datasets/millionsong/{MANIFEST}")
    assert not is_present(store, old)


@pytest.mark.parametrize("settings", ["SCALELAB_STORE_OPTIONS", "AWS_*"])
def test_the_scalelab_data_fetch_command_into_s3(s3: SeaweedS3, shared_data: Path, settings: str):
    """The command ops run, in its own process, with the endpoint and keys in ScaleLab's
    ``storage_options`` variable or in botocore's own environment variables."""
    bucket = f"course-{uuid.uuid4().hex[:8]}"
    open_store(f"s3://{bucket}", s3.options(*ADMIN)).fs.mkdir(bucket)
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("SCALELAB_", "AWS_"))
    }
    if settings == "AWS_*":
        env.update(AWS_ACCESS_KEY_ID=ADMIN[0], AWS_SECRET_ACCESS_KEY=ADMIN[1])
        env.update(AWS_ENDPOINT_URL=s3.endpoint, AWS_DEFAULT_REGION="us-east-1")
    else:
        env["SCALELAB_STORE_OPTIONS"] = json.dumps(s3.options(*ADMIN))
    argv = [
        str(Path(sys.executable).with_name("scalelab")),
        *("data", "fetch", "millionsong", "--no-download"),
        *("--store", f"s3://{bucket}/course", "--mirror", str(shared_data)),
    ]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "millionsong: written to datasets/millionsong/ (all: 6724 rows)" in first.stdout
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already in the store at datasets/millionsong/, nothing to do" in again.stdout
    store = open_store(f"s3://{bucket}/course", s3.options(*ADMIN))
    assert is_present(store, MILLIONSONG)
