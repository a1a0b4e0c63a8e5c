"""Known-harmless lines that native code writes straight to stderr, dropped by their own text.

:class:`Harmless` names one such line (and, optionally, the line before it); :class:`LineFilter`
drops them from a byte stream (pure) and may fold a JVM's own stack traces into one line;
:func:`forward` copies a pipe through a filter, optionally through a :class:`Hold` that keeps an
error burst back until an explanation has gone first; :func:`filtered_stderr` filters fd 2 for a
block.
Why: docs/design-notes.md, scalelab.common.stderr_lines.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import select
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

#: Seconds of quiet after which a partial line (or a held line) is passed on as it is.
QUIET_S = 0.2
#: Seconds :func:`filtered_stderr` waits at its end for the filter to pass on what it read.
DRAIN_S = 5.0
#: One line of a Java stack trace below its exception's line: a frame (``\tat ...``) or the
#: ``... 12 more`` that ends a cause's frames.
JAVA_FRAME = re.compile(
    rb"\s+(at [\w$./<>-]+\(.*\)|\.\.\. \d+ more|\.\.\. \d+ common frames omitted)"
)


@dataclass(frozen=True)
class Harmless:
    """One known-harmless line of a library's stderr.

    ``line``: a regular expression (bytes) that the whole line, without its line end, must
    match; ``preamble``: one that the line just before it may match, dropped with it (and only
    with it: alone, it passes); ``why``: why the line is harmless (for the docs and readers).
    """

    line: re.Pattern[bytes]
    why: str
    preamble: re.Pattern[bytes] | None = None


class LineFilter:
    """Drops :class:`Harmless` lines from a byte stream fed in pieces of any size.

    :meth:`feed` returns what to pass on now: whole lines, except the dropped ones; a partial
    line, or a line that may be the preamble of a harmless one, is held until the next piece
    tells (or :meth:`flush` passes it on). With ``fold_java_frames``, each run of
    :data:`JAVA_FRAME` lines is passed on as one line, ``\t... N Java frames left out``, after
    the exception's own line (and each ``Caused by:`` line) that came before it.
    """

    def __init__(self, known: Sequence[Harmless], *, fold_java_frames: bool = False):
        self.known = tuple(known)
        self.fold_java_frames = fold_java_frames
        self._partial = b""
        self._held = b""  # a whole line that may be a preamble
        self._frames = 0  # Java frames left out since the last line passed on

    @property
    def holding(self) -> bool:
        """Whether something is held (a partial line, a possible preamble)."""
        return bool(self._partial or self._held or self._frames)

    def feed(self, data: bytes) -> bytes:
        """The bytes of ``data`` (after what was held) to pass on now."""
        *lines, self._partial = (self._partial + data).split(b"\n")
        return b"".join(self._line(line + b"\n") for line in lines)

    def flush(self) -> bytes:
        """Everything held, to pass on as it is (the stream ended or went quiet)."""
        out = self._folded() + self._held + self._partial
        self._held = self._partial = b""
        return out

    def _folded(self) -> bytes:
        """The line that stands for the Java frames left out since the last line, if any."""
        count, self._frames = self._frames, 0
        return b"\t... %d Java frames left out\n" % count if count else b""

    def _line(self, line: bytes) -> bytes:
        text = line.rstrip(b"\r\n")
        held, self._held = self._held, b""
        if self.fold_java_frames and JAVA_FRAME.fullmatch(text):
            self._frames += 1
            return held
        held = self._folded() + held
        if held:
            before = held.rstrip(b"\r\n")
            for known in self.known:
                if (
                    known.preamble is not None
                    and known.preamble.fullmatch(before)
                    and known.line.fullmatch(text)
                ):
                    return b""
        if any(known.line.fullmatch(text) for known in self.known):
            return held
        if any(k.preamble is not None and k.preamble.fullmatch(text) for k in self.known):
            self._held = line
            return held
        return held + line


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd``; False if ``fd`` no longer takes it."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue
        except OSError:
            return False
    return True


class Hold:
    """Keeps an error burst of a stream back for a while, so that what explains it comes first.

    :meth:`write` (the :func:`forward` thread) passes bytes on to ``target`` (a file
    descriptor) at once, except while armed (:meth:`arm`: a cell runs) once a line matches
    ``burst`` (say, a JVM's ``ERROR`` record or its ``Exception in thread "..."``): from that
    line on everything is held, in order, until :meth:`release` or :meth:`disarm` (the cell
    ended, its explanation shown) or until ``hold_s`` seconds have passed since the first held
    line (:meth:`due_in` tells the thread when). Nothing is dropped. Thread-safe.

    Why: a driver JVM that runs out of memory prints its dying threads' errors on its stderr
    while the cell still waits for its answer; ScaleLab's explanation of the same failure,
    printed when the cell's error arrives, must be the first thing under the cell.
    """

    def __init__(self, target: int, burst: re.Pattern[bytes], hold_s: float):
        self.target = target
        self.burst = burst
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._held: list[bytes] = []
        self._since: float | None = None  # time.monotonic() of the first held line
        self._armed = False
        self._open = True

    def arm(self) -> None:
        """Hold the bursts that come from now on (a cell starts)."""
        with self._lock:
            self._armed = True

    def disarm(self) -> None:
        """Pass on everything held and hold nothing more until :meth:`arm` (the cell ended)."""
        with self._lock:
            self._armed = False
        self.release()

    def write(self, data: bytes) -> bool:
        """Pass ``data`` on, or hold it (see the class); False once ``target`` takes no more."""
        with self._lock:
            if self._since is None:
                at = self._burst_start(data) if self._armed else None
                if at is None:
                    return self._write(data)
                self._write(data[:at])
                data = data[at:]
                self._since = time.monotonic()
            self._held.append(data)
            return self._open

    def due_in(self) -> float | None:
        """Seconds until what is held is passed on anyway (None: nothing is held)."""
        with self._lock:
            if self._since is None:
                return None
            return max(0.0, self._since + self.hold_s - time.monotonic())

    def release(self) -> None:
        """Pass on everything held now; while armed, the next burst is held again."""
        with self._lock:
            held, self._held, self._since = b"".join(self._held), [], None
            if held:
                self._write(held)

    def _burst_start(self, data: bytes) -> int | None:
        start = 0
        for line in data.splitlines(keepends=True):
            if self.burst.match(line.rstrip(b"\r\n")):
                return start
            start += len(line)
        return None

    def _write(self, data: bytes) -> bool:
        self._open = self._open and _write_all(self.target, data)
        return self._open


def forward(
    source: int,
    target: int,
    known: Sequence[Harmless],
    *,
    close_target: bool = False,
    fold_java_frames: bool = False,
    hold: Hold | None = None,
) -> threading.Thread:
    """Copy file descriptor ``source`` (the read end of a pipe) to ``target`` until end of file,
    without the :class:`Harmless` lines, in a daemon thread (returned, started); with
    ``fold_java_frames``, each run of a Java stack trace's frames is one line (:class:`LineFilter`).

    A partial line is passed on after :data:`QUIET_S` seconds of quiet, so a prompt or a
    progress line is not held back. ``source`` (and ``target`` with ``close_target``) is closed
    at the end. If ``target`` stops taking data, ``source`` is still read to its end, so the
    writer never blocks on a full pipe. With ``hold`` (whose own target must be ``target``),
    what passes the filter goes through it: error bursts wait for :meth:`Hold.release` or its
    time; at the end of file everything held is passed on.
    """
    if hold is not None and hold.target != target:
        raise ValueError(f"hold writes to fd {hold.target}, not to the target fd {target}")
    sink = hold.write if hold is not None else functools.partial(_write_all, target)

    def timeout_ms() -> float | None:
        waits = [QUIET_S] if lines.holding else []
        due = hold.due_in() if hold is not None else None
        if due is not None:
            waits.append(due)
        return min(waits) * 1000 if waits else None

    lines = LineFilter(known, fold_java_frames=fold_java_frames)

    def run() -> None:
        open_target = True
        poller = select.poll()  # not select(): a kernel may hold descriptors past 1023
        poller.register(source, select.POLLIN)
        try:
            while True:
                if not poller.poll(timeout_ms()):
                    open_target = open_target and sink(lines.flush())
                else:
                    data = os.read(source, 65536)
                    if not data:
                        break
                    passed = lines.feed(data)
                    if passed and open_target:
                        open_target = sink(passed)
                if hold is not None and hold.due_in() == 0:
                    hold.release()  # its time is up, even while the source keeps writing
            if open_target:
                sink(lines.flush())
            if hold is not None:
                hold.release()
        finally:
            os.close(source)
            if close_target:
                os.close(target)

    thread = threading.Thread(target=run, name="scalelab-stderr-filter", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def filtered_stderr(known: Sequence[Harmless], fd: int = 2) -> Iterator[None]:
    """Within the block, what the process writes to ``fd`` (its stderr: C code's and Python's
    ``sys.__stderr__`` alike) goes through a pipe and a :func:`forward` thread to where ``fd``
    pointed before, without the ``known`` lines. At the end ``fd`` points there again, and the
    thread is given :data:`DRAIN_S` seconds to pass on the rest (a child that kept a copy of the
    pipe keeps it open longer: the thread then finishes on its own). Where ``fd`` is not open,
    there is nothing to filter: the block runs as it is."""
    try:
        saved = os.dup(fd)
    except OSError:
        yield
        return
    read_end, write_end = os.pipe()
    try:
        os.dup2(write_end, fd)
    except OSError:
        for end in (read_end, write_end, saved):
            os.close(end)
        raise
    os.close(write_end)
    thread = forward(read_end, saved, known, close_target=True)
    try:
        yield
    finally:
        os.dup2(saved, fd)  # closes fd's copy of the pipe: the thread reads to its end
        thread.join(DRAIN_S)
