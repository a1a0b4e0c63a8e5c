"""The pure parts of streaming from HDFS: the forked child's wait for the parent's cached
DataNode connections (``store/access/hdfs_fork.py``) and the benchmark's shards
(``bench/hdfs_stream.py``). The fork itself is tested on the cluster in
``tests/integration/hadoop/test_streaming_hdfs.py``."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench.hdfs_stream import FEATURE_NAMES, median, shard_table, song_rows
from scalelab.store.access.hdfs_fork import DATANODE_CACHE_EXPIRY_S, _ReadClock


def test_a_child_of_a_parent_that_read_nothing_does_not_wait():
    clock = _ReadClock()
    clock.forked()
    slept = []
    assert clock.wait_for_inherited_connections(sleep=slept.append) == 0.0
    assert slept == []


def test_a_child_waits_out_the_cache_after_the_parents_last_read_once():
    clock = _ReadClock()
    clock.begin()
    clock.end()
    clock.forked()
    slept = []
    waited = clock.wait_for_inherited_connections(sleep=slept.append)
    assert DATANODE_CACHE_EXPIRY_S - 0.5 < waited <= DATANODE_CACHE_EXPIRY_S
    assert slept == [waited]
    assert clock.wait_for_inherited_connections(sleep=slept.append) == 0.0  # once only
    assert clock.in_flight == 0 and clock.last_read == 0.0  # the child's own reads start anew


def test_a_read_running_at_the_fork_counts_as_just_finished():
    clock = _ReadClock()
    clock.begin()  # another thread of the parent is reading
    clock.forked()
    slept = []
    waited = clock.wait_for_inherited_connections(sleep=slept.append)
    assert waited == pytest.approx(DATANODE_CACHE_EXPIRY_S, abs=0.1)


def test_an_old_read_needs_no_wait():
    clock = _ReadClock()
    clock.begin()
    clock.end()
    clock.last_read = time.monotonic() - DATANODE_CACHE_EXPIRY_S - 1
    clock.forked()
    assert clock.wait_for_inherited_connections(sleep=lambda s: pytest.fail("slept")) == 0.0


def test_bench_shards_repeat_the_song_rows_in_the_million_song_schema():
    songs, source = song_rows()
    assert songs.shape[1] == 91 and source in ("millionsong+78 random", "synthetic")
    table = shard_table(songs, len(songs) - 2, 5)
    assert table.column_names == ["year", *FEATURE_NAMES]
    got = np.column_stack([c.to_numpy() for c in table.columns])
    assert np.array_equal(got, songs[[len(songs) - 2, len(songs) - 1, 0, 1, 2]])
    assert median([3.0, 1.0, 2.0, 10.0]) == 2.5
