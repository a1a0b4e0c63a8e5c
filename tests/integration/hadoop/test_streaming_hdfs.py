"""Streaming from HDFS into training: the streaming datasets over shards in the HDFS test cluster.

Real parts throughout: the test cluster (``tests/support/hadoopcluster.py``) reached through the
``hdfs://`` store (hdfs-native), torch DataLoaders with forked workers, TensorFlow's tf.data.
The shards hold the real Million Song subset (``../shared/data``: year and 12 features) with a
``row`` column, its index in the data set, so that every sample can be checked: 16 shards of
1,681 rows (about 0.2 MiB each, row groups of 400 rows), the subset's 6,724 rows 4 times over.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hdfs_native.fsspec import HdfsFileSystem
from torch.utils.data import DataLoader

from scalelab.store import open_store
from scalelab.store.access.hdfs_fork import DATANODE_CACHE_EXPIRY_S
from scalelab.store.access.readahead import DEFAULT_BLOCK_SIZE, ReadAheadFile
from scalelab.store.streaming import TorchParquetDataset, tf_dataset, write_tfrecord_shards
from tests.support.hadoopcluster import HadoopTestCluster

REPO = Path(__file__).resolve().parents[3]
SONGS = "datasets/millionsong/parquet"
TFRECORDS = "datasets/millionsong/tfrecord"
SHARDS = 16
ROWS_PER_SHARD = 1681
TOTAL = SHARDS * ROWS_PER_SHARD
FEATURES = [f"f{i:02d}" for i in range(1, 13)]


@pytest.fixture(scope="module")
def songs(shared_data: Path) -> np.ndarray:
    """The real Million Song subset: float64 ``(6724, 13)``, the year first."""
    return np.loadtxt(shared_data / "millionsong" / "millionsong.txt", delimiter=",", ndmin=2)


@pytest.fixture(scope="module")
def url(hdfs_cluster: HadoopTestCluster, songs: np.ndarray) -> Iterator[str]:
    """A course folder in HDFS holding the Parquet and TFRecord shards; ``HADOOP_CONF_DIR`` set
    (the client is the superuser, as ops' tools are)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HADOOP_CONF_DIR", str(hdfs_cluster.conf_dir))
        env.delenv("HADOOP_USER_NAME", raising=False)
        course = hdfs_cluster.url(f"/stream-{uuid.uuid4().hex[:8]}")
        store = open_store(course)
        for i in range(SHARDS):
            rows = np.arange(i * ROWS_PER_SHARD, (i + 1) * ROWS_PER_SHARD)
            block = songs[rows % len(songs)]
            columns = {"row": rows, "year": block[:, 0]}
            columns.update({name: block[:, k + 1] for k, name in enumerate(FEATURES)})
            with store.open(f"{SONGS}/part-{i:05d}.parquet", "wb") as f:
                pq.write_table(pa.table(columns), f, row_group_size=400)
        write_tfrecord_shards(
            ({"row": int(r), "year": float(songs[r % len(songs), 0])} for r in range(TOTAL)),
            TFRECORDS,
            store=store,
            records_per_shard=ROWS_PER_SHARD,
        )
        yield course


def _loader_rows(loader: DataLoader, songs: np.ndarray) -> np.ndarray:
    """The ``row`` of every sample the loader yields, in order, after checking each sample's
    year and features against the real data."""
    seen = []
    for batch in loader:
        rows = batch["row"].numpy()
        source = songs[rows % len(songs)]
        assert np.array_equal(batch["year"].numpy(), source[:, 0])
        assert np.array_equal(batch["features"].numpy(), source[:, 1:])
        seen.append(rows)
    return np.concatenate(seen)


def _dataset(store: Any, seed: int = 7, **options: Any) -> TorchParquetDataset:
    return TorchParquetDataset(
        SONGS, store=store, seed=seed, batch_size=500, stack={"features": FEATURES}, **options
    )


def test_two_workers_stream_every_sample_once_per_epoch_in_a_new_order_each_epoch(
    url: str, songs: np.ndarray
):
    store = open_store(url)
    loader = DataLoader(
        _dataset(store),
        batch_size=None,
        num_workers=2,
        generator=torch.Generator().manual_seed(11),
    )
    epochs = [_loader_rows(loader, songs) for _ in range(2)]
    for rows in epochs:
        assert len(rows) == TOTAL
        assert np.array_equal(np.sort(rows), np.arange(TOTAL))
    assert not np.array_equal(epochs[0], epochs[1])
    # The same seeds (the dataset's and the DataLoader's) give the same order again.
    again = DataLoader(
        _dataset(open_store(url)),
        batch_size=None,
        num_workers=2,
        generator=torch.Generator().manual_seed(11),
    )
    assert np.array_equal(_loader_rows(again, songs), epochs[0])
    # Persistent workers: the dataset's own epoch (set_epoch) decides the order.
    ds = _dataset(store, seed=3)
    persistent = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    ds.set_epoch(5)
    fifth = _loader_rows(persistent, songs)
    assert np.array_equal(np.sort(fifth), np.arange(TOTAL))
    assert not np.array_equal(fifth, epochs[0])


def test_a_store_the_parent_used_just_before_the_fork_never_breaks_a_worker(
    url: str, songs: np.ndarray
):
    """The parent opens the store, lists the shards and reads one (its DataNode connection is
    then in hdfs-native's cache for 3 s) just before the DataLoader forks; the dataset holds the
    only reference to that store, so each worker also drops the parent's client."""
    store = open_store(url)
    shards = store.ls(SONGS, detail=False)
    assert len(shards) == SHARDS
    assert pq.read_metadata(store.open(shards[0], "rb")).num_rows == ROWS_PER_SHARD
    ds = _dataset(store)
    del store
    began = time.monotonic()
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    rows = _loader_rows(loader, songs)
    assert np.array_equal(np.sort(rows), np.arange(TOTAL))
    # At most one wait for the parent's cached connections, not one per shard.
    assert time.monotonic() - began < 60
    assert ds._fs().cat_file(shards[0], start=0, end=4) == b"PAR1"  # the parent's still works


def test_the_stores_files_read_ahead_unless_the_store_options_turn_it_off(
    url: str, songs: np.ndarray
):
    """A shard opened from HDFS reads ahead (one DataNode request per block, not one per column
    chunk pyarrow asks for); ``default_block_size=0`` gives hdfs-native's own file, also in the
    DataLoader's workers, which rebuild the store from its options, and a forked child's own
    client is made from the same options."""
    ahead, off = open_store(url), open_store(url, {"default_block_size": 0})
    shard = sorted(ahead.ls(SONGS, detail=False))[0]
    with ahead.open(shard, "rb") as f:
        assert isinstance(f, ReadAheadFile) and f.block_size == DEFAULT_BLOCK_SIZE
        read_ahead = pq.read_table(f)
    with ahead.open(shard, "rb", block_size=4096) as f:
        assert f.block_size == 4096
    with off.open(shard, "rb") as f:
        assert not isinstance(f, ReadAheadFile)
        unbuffered = pq.read_table(f)
    assert read_ahead.num_rows == ROWS_PER_SHARD and read_ahead.equals(unbuffered)
    loader = DataLoader(_dataset(off), batch_size=None, num_workers=2)
    assert np.array_equal(np.sort(_loader_rows(loader, songs)), np.arange(TOTAL))
    # A forked child that uses the parent's store makes its own client from the same options.
    digest = hashlib.sha256(off.cat_file(shard)).hexdigest()
    assert _cat_in_a_forked_child(off, shard, timeout_s=60) == digest


def _cat_in_a_forked_child(fs: Any, path: str, timeout_s: float) -> str | None:
    """The SHA-256 of ``fs.cat_file(path)`` read in a forked child (a digest: a child cannot
    exit before a large queued result is read); None when it did not finish within
    ``timeout_s`` (the child is killed)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=lambda: queue.put(hashlib.sha256(fs.cat_file(path)).hexdigest()))
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        queue.close()
        return None
    got = queue.get(timeout=10)
    queue.close()
    return got


def test_hdfs_natives_own_file_system_hangs_in_a_child_that_the_store_does_not(
    url: str, hdfs_cluster: HadoopTestCluster
):
    """The hazard is real: hdfs-native's own fsspec file system, used in a child forked just
    after the parent read, never answers (the child takes the parent's cached DataNode
    connection); the store's, in the same situation, answers after the cache's expiry."""
    path = f"{urlsplit(url).path}/{SONGS}/part-00000.parquet"
    plain = HdfsFileSystem(host="127.0.0.1", port=hdfs_cluster.rpc_port, skip_instance_cache=True)
    head = plain.cat_file(path, start=0, end=4)
    assert head == b"PAR1"
    assert _cat_in_a_forked_child(plain, path, timeout_s=3 * DATANODE_CACHE_EXPIRY_S) is None

    store = open_store(url)
    whole = hashlib.sha256(store.cat_file(f"{SONGS}/part-00000.parquet")).hexdigest()
    began = time.monotonic()
    assert _cat_in_a_forked_child(store, f"{SONGS}/part-00000.parquet", timeout_s=60) == whole
    assert time.monotonic() - began >= DATANODE_CACHE_EXPIRY_S - 0.5  # it waited the cache out


def _stream_peak(url: str, path: str, epochs: int, hdfs_cluster: HadoopTestCluster) -> dict:
    """``bench/hdfs_stream.py``'s stream contender in a child process of its own: the features
    stacked, 2 persistent workers (the same two over every epoch), a 2,048-row buffer; its peak
    PSS (the child and its workers)."""
    params = {
        "url": url,
        "path": path,
        "workers": 2,
        "persistent_workers": True,
        "epochs": epochs,
        "batch_size": 256,
        "buffer_rows": 2048,
        "features": FEATURES,
    }
    env = {**os.environ, **hdfs_cluster.environment()}
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "hdfs_stream.py"),
            "--child",
            "stream",
            json.dumps(params),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_memory_stays_flat_however_many_shards_are_streamed(
    url: str, hdfs_cluster: HadoopTestCluster
):
    """Every shard 2 times against 24 times (22 epochs more, 59 MiB more features): the peak
    memory of the child and its workers grows by less than half of what was streamed more, so
    rows are not kept. The same two workers serve every epoch, so a worker that kept its rows
    would grow by all of it. (Workers started anew each epoch made the peak count the last
    epoch's, still exiting on a busy host, beside the new ones: 45 MiB of growth in one CI
    run, noise that grew with the epochs.)"""
    short = _stream_peak(url, SONGS, 2, hdfs_cluster)
    long = _stream_peak(url, SONGS, 24, hdfs_cluster)
    assert short["rows"] == 2 * TOTAL and long["rows"] == 24 * TOTAL
    more_mib = 22 * TOTAL * (len(FEATURES) + 1) * 8 / 2**20
    assert more_mib > 50
    growth_mib = (long["peak_pss"] - short["peak_pss"]) / 2**20
    assert growth_mib < 0.5 * more_mib, (growth_mib, more_mib, short, long)


def test_tf_data_streams_tfrecord_and_parquet_shards_from_hdfs(url: str, songs: np.ndarray):
    import tensorflow as tf

    store = open_store(url)
    expected = {r: songs[r % len(songs), 0] for r in range(TOTAL)}

    def epoch(ds: tf.data.Dataset) -> list[int]:
        rows = []
        for element in ds.as_numpy_iterator():
            row = int(element["row"])
            assert abs(float(element["year"]) - expected[row]) < 1e-3  # float32 in TFRecord
            rows.append(row)
        return rows

    for format, path in (("tfrecord", TFRECORDS), ("parquet", SONGS)):
        columns = ["row", "year"]
        ds = tf_dataset(path, store=store, format=format, seed=5, columns=columns, buffer_rows=1024)
        first, second = epoch(ds), epoch(ds)
        assert sorted(first) == list(range(TOTAL)), format
        assert sorted(second) == list(range(TOTAL)), format
        assert first != second, f"{format}: the same order in two epochs"
        same = tf_dataset(
            path, store=store, format=format, seed=5, columns=columns, buffer_rows=1024
        )
        assert epoch(same) == first, f"{format}: the same seed gave another order"


#: A child process streaming a tf.data dataset from the store; prints its rows and peak RSS.
TF_CHILD = """
import json, resource, sys
from scalelab.store import open_store
from scalelab.store.streaming import tf_dataset
url, path, format, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = open_store(url)
ds = tf_dataset(path, store=store, format=format, columns=["row", "year"], buffer_rows=1024)
rows = 0
for _ in range(epochs):
    for batch in ds.batch(1024).as_numpy_iterator():
        rows += len(batch["row"])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rows": rows, "peak_rss": peak}))
"""


@pytest.mark.parametrize(
    ("format", "path", "two_shards"),
    [
        ("tfrecord", TFRECORDS, f"{TFRECORDS}/part-0000[01].tfrecord"),
        ("parquet", SONGS, f"{SONGS}/part-0000[01].parquet"),
    ],
)
def test_tf_data_memory_stays_flat_however_many_shards_are_streamed(
    url: str, hdfs_cluster: HadoopTestCluster, format: str, path: str, two_shards: str
):
    """2 shards once against 16 shards 6 times, each in a process of its own (tf.data reads
    in threads, not workers): the peak RSS does not grow with what was streamed."""
    env = {**os.environ, **hdfs_cluster.environment(), "TF_CPP_MIN_LOG_LEVEL": "2"}
    peaks = {}
    for name, shards, epochs in (("short", two_shards, 1), ("long", path, 6)):
        argv = [sys.executable, "-c", TF_CHILD, url, shards, format, str(epochs)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        peaks[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert peaks["short"]["rows"] == 2 * ROWS_PER_SHARD and peaks["long"]["rows"] == 6 * TOTAL
    growth_mib = (peaks["long"]["peak_rss"] - peaks["short"]["peak_rss"]) / 2**20
    assert growth_mib < 32, (format, growth_mib, peaks)
