"""Read-ahead over a remote file's byte ranges (``store/access/readahead.py``), pure: the file
is bytes in memory behind the ``read_range`` a DataNode file has, counting each request. The
real DataNode reads are in ``tests/integration/hadoop/test_streaming_hdfs.py``."""

from __future__ import annotations

import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scalelab.store.access.readahead import DEFAULT_BLOCK_SIZE, ReadAheadFile


class Ranges:
    """A file's bytes served by byte range, as hdfs-native's reader serves them; ``requests``
    holds every ``(offset, length)`` asked for."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.requests: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.data)

    def read_range(self, offset: int, len: int) -> bytes:
        self.requests.append((offset, len))
        return self.data[offset : offset + len]


DATA = bytes(range(256)) * 40  # 10,240 bytes, every offset's byte known


def test_small_sequential_reads_make_one_request_per_block_and_return_the_files_bytes():
    source = Ranges(DATA)
    f = ReadAheadFile(source, block_size=1000)
    got = b"".join(iter(lambda: f.read(7), b""))
    assert got == DATA
    blocks = [(start, min(1000, len(DATA) - start)) for start in range(0, len(DATA), 1000)]
    assert source.requests == blocks
    assert f.read(7) == b""  # at the end


def test_a_read_across_a_blocks_end_takes_its_tail_and_the_next_block():
    source = Ranges(DATA)
    f = ReadAheadFile(source, block_size=1000)
    assert f.read(990) == DATA[:990]
    assert f.read(20) == DATA[990:1010]  # 10 bytes from the first block, 10 from the next
    assert source.requests == [(0, 1000), (1000, 1000)]
    assert f.tell() == 1010


def test_a_read_of_a_block_or_more_goes_to_the_store_as_it_is():
    source = Ranges(DATA)
    f = ReadAheadFile(source, block_size=1000)
    f.seek(5)
    assert f.read(3000) == DATA[5:3005]
    assert source.requests == [(5, 3000)]
    assert f.read() == DATA[3005:]  # to the end: one more request, not one per block
    assert source.requests[1:] == [(3005, len(DATA) - 3005)]


def test_seeks_move_without_a_request_and_answer_the_new_position():
    source = Ranges(DATA)
    f = ReadAheadFile(source, block_size=1000)
    assert f.seek(-8, os.SEEK_END) == len(DATA) - 8
    assert f.read(100) == DATA[-8:]  # clipped at the end: a request of 8 bytes, not 1000
    assert source.requests == [(len(DATA) - 8, 8)]
    assert f.seek(2000) == 2000
    assert f.seek(-500, os.SEEK_CUR) == 1500
    assert source.requests == [(len(DATA) - 8, 8)]
    assert f.read(4) == DATA[1500:1504]
    buffer = bytearray(6)
    assert f.readinto(buffer) == 6 and bytes(buffer) == DATA[1504:1510]
    assert len(source.requests) == 2  # readinto was served from the block
    assert f.seekable() and f.readable() and not f.writable()
    assert len(f) == len(DATA)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.seek(-1), "negative seek position -1"),
        (lambda f: f.seek(0, 3), "whence must be 0, 1 or 2"),
    ],
)
def test_a_bad_seek_is_refused_and_the_position_kept(call, message):
    f = ReadAheadFile(Ranges(DATA), block_size=1000)
    f.seek(10)
    with pytest.raises(ValueError, match=message):
        call(f)
    assert f.tell() == 10


def test_no_block_size_below_one_byte_and_no_read_after_close():
    with pytest.raises(ValueError, match="block_size must be 1 byte or more, not 0"):
        ReadAheadFile(Ranges(DATA), block_size=0)
    f = ReadAheadFile(Ranges(DATA))
    assert f.block_size == DEFAULT_BLOCK_SIZE == 2**20
    f.read(1)
    f.close()
    with pytest.raises(ValueError, match="closed file"):
        f.read(1)


def test_a_file_shorter_than_when_it_was_opened_ends_the_read_without_a_loop():
    source = Ranges(DATA)
    f = ReadAheadFile(source, block_size=1000)
    source.data = DATA[:1500]  # truncated after the open
    assert f.read(1200) == DATA[:1200]  # the block had the first 1000 bytes: then 500 more
    assert f.read(1000) == DATA[1200:1500]
    assert f.read(10) == b""


def test_pyarrow_reads_a_parquet_row_group_through_few_requests_and_gets_the_same_table():
    """The kind of fault fixed: pyarrow asks for each column chunk on its own (91 of about 4
    KiB here); each was a DataNode request."""
    rng = np.random.default_rng(0)
    table = pa.table({f"f{i:02d}": rng.standard_normal(1000) for i in range(91)})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", row_group_size=500)
    data = sink.getvalue()
    unbuffered = Ranges(data)
    # Blocks of one byte: every read goes to the store as it is, as hdfs-native's own file does.
    direct = pq.ParquetFile(ReadAheadFile(unbuffered, block_size=1), pre_buffer=False).read(
        use_threads=False
    )
    source = Ranges(data)
    through = pq.ParquetFile(ReadAheadFile(source), pre_buffer=False).read(use_threads=False)
    assert through.equals(table) and direct.equals(table)
    assert len(unbuffered.requests) >= 2 * 91  # one per column chunk, at least
    assert len(data) < DEFAULT_BLOCK_SIZE
    assert len(source.requests) <= 3, source.requests  # the footer, then the rest at once


def test_read_buffer_is_a_view_of_the_block_and_read_a_copy_in_bytes():
    """pyarrow takes ``read_buffer`` where a file has it: a column chunk without a copy."""
    source = Ranges(DATA)
    f = ReadAheadFile(source, block_size=1000)
    view = f.read_buffer(10)
    assert isinstance(view, memoryview) and view == DATA[:10]
    assert view.obj is f._block  # the block itself, not a copy of it
    copy = f.read(10)
    assert type(copy) is bytes and copy == DATA[10:20]
    f.seek(995)
    assert f.read_buffer(10) == DATA[995:1005]  # across two blocks: joined, still right
    assert len(source.requests) == 2
