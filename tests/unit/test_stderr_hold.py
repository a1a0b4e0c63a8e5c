"""A driver JVM's error burst waits for the cell's end, so ScaleLab's explanation comes first
(issue 34, Must 6; CI 2026-12-07 showed ``Exception in thread "RemoteBlock-temp-file-clean-thread"
java.lang.OutOfMemoryError`` above it). Pure parts and real pipes; the kernel itself runs in
``tests/integration/spark/test_spark_kernel.py``."""

from __future__ import annotations

import os
import re
import select
import threading
import time

import pytest

from scalelab.common.stderr_lines import Hold, forward
from scalelab.kernels.spark_session import DRIVER_ERROR_BURST, JVM_START_LINES

#: What the driver printed above the explanation in that CI run (its first lines).
DYING = (
    b'Exception in thread "RemoteBlock-temp-file-clean-thread" java.lang.OutOfMemoryError: '
    b"Java heap space\n"
    b"\t... 6 Java frames left out\n"
    b"21:36:16 ERROR Utils: uncaught error in thread Spark Context Cleaner, stopping SparkContext\n"
)
BURST = re.compile(rb"ERROR ")


def _pipe_hold(burst: re.Pattern[bytes] = BURST, hold_s: float = 600.0):
    read_end, write_end = os.pipe()
    return Hold(write_end, burst, hold_s), read_end, write_end


def _read_now(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0)[0]:
        piece = os.read(fd, 65536)
        if not piece:
            break
        out += piece
    return out


def _read_until(fd: int, wanted: bytes, limit_s: float = 60.0) -> bytes:
    """What ``fd`` gives until ``wanted`` is in it (or ``limit_s`` passed: a generous bound
    for a failing test, no timing figure)."""
    out = b""
    deadline = time.monotonic() + limit_s
    while wanted not in out and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            out += os.read(fd, 65536)
    return out


def test_the_burst_pattern_takes_the_drivers_dying_lines_and_nothing_else():
    starts = [line for line in DYING.splitlines() if DRIVER_ERROR_BURST.match(line)]
    assert starts == [DYING.splitlines()[0], DYING.splitlines()[2]]
    for calm in (
        b"21:36:16 WARN MemoryStore: Not enough space to cache rdd_3_0 in memory!",
        b"Setting default log level to WARN.",
        b"ERROR in my own print",  # a student's own line, no timestamp
        b"[Stage 3:>          (0 + 1) / 1]",
    ):
        assert not DRIVER_ERROR_BURST.match(calm), calm
    assert DRIVER_ERROR_BURST.match(
        b"Exception: java.lang.OutOfMemoryError thrown from the UncaughtExceptionHandler in "
        b'thread "driver-heartbeater"'
    )
    assert not any(known.line.match(DYING.splitlines()[0]) for known in JVM_START_LINES)


def test_unarmed_a_burst_passes_at_once():
    hold, read_end, write_end = _pipe_hold()
    try:
        assert hold.write(b"a\n21:36:16 ERROR X: y\nb\n")
        assert _read_now(read_end) == b"a\n21:36:16 ERROR X: y\nb\n"
        assert hold.due_in() is None
    finally:
        os.close(read_end), os.close(write_end)


def test_armed_the_burst_and_all_after_it_wait_in_order_until_the_cell_ends():
    hold, read_end, write_end = _pipe_hold()
    try:
        hold.arm()
        assert hold.write(b"calm 1\ncalm 2\nERROR one\n\tat frame\n")
        assert hold.write(b"calm 3, after the burst\n")
        assert _read_now(read_end) == b"calm 1\ncalm 2\n"  # only what came before the burst
        assert 0 < hold.due_in() <= 600.0
        hold.release()  # the explanation has been shown
        assert _read_now(read_end) == b"ERROR one\n\tat frame\ncalm 3, after the burst\n"
        hold.write(b"ERROR two\n")  # still armed: the next burst waits again
        assert _read_now(read_end) == b""
        hold.disarm()  # the cell ended
        assert _read_now(read_end) == b"ERROR two\n"
        hold.write(b"ERROR three\n")  # between cells: at once
        assert _read_now(read_end) == b"ERROR three\n"
    finally:
        os.close(read_end), os.close(write_end)


def test_forward_passes_a_held_burst_on_when_its_time_is_up_even_while_the_source_writes():
    source_read, source_write = os.pipe()
    hold, target_read, target_write = _pipe_hold(hold_s=0.3)
    hold.arm()
    thread = forward(source_read, target_write, (), hold=hold, close_target=True)
    stop = threading.Event()

    def chatter() -> None:  # a JVM that keeps writing: the poll never goes quiet
        os.write(source_write, b"ERROR first\n")
        while not stop.is_set():
            os.write(source_write, b"tick\n")
            time.sleep(0.02)

    writer = threading.Thread(target=chatter)
    writer.start()
    try:
        seen = _read_until(target_read, b"ERROR first\n")
        assert seen.startswith(b"ERROR first\ntick\n"), seen[:60]
        assert stop.is_set() is False  # released while the source still wrote
    finally:
        stop.set()
        writer.join()
        os.close(source_write)
        thread.join(30)
        os.close(target_read)
    assert not thread.is_alive()


def test_forward_passes_everything_held_on_at_the_end_of_file():
    source_read, source_write = os.pipe()
    hold, target_read, target_write = _pipe_hold()
    hold.arm()
    thread = forward(source_read, target_write, (), hold=hold, close_target=True)
    os.write(source_write, b"calm\nERROR last words\n\tat frame\nno newline")
    os.close(source_write)  # the JVM ended
    thread.join(30)
    try:
        assert _read_until(target_read, b"no newline") == (
            b"calm\nERROR last words\n\tat frame\nno newline"
        )
    finally:
        os.close(target_read)


def test_forward_refuses_a_hold_that_writes_elsewhere():
    hold, read_end, write_end = _pipe_hold()
    try:
        with pytest.raises(ValueError, match="not to the target fd"):
            forward(read_end, 2, (), hold=hold)
    finally:
        os.close(read_end), os.close(write_end)
