"""What every bench prints beside its wall times: the machine's load, CPU seconds, peak memory.

On a shared machine a wall time alone says little: the load average at the start and at the end
says how busy the machine was, and CPU seconds (user + system) are disturbed far less by other
work than wall seconds. Peak memory is read from counters the kernel keeps (``VmHWM`` of a
live process in ``/proc/<pid>/status``, ``ru_maxrss`` of a reaped child through ``wait4``), or
sampled at the start, at the end and on an interval, so that a run shorter than the interval
never reads 0.

Nothing here runs at import time. :class:`RunInfo`, :func:`vm_hwm` and :func:`run_measured`
need only the standard library (a bare machine with ``pip install --no-deps`` has them); the
process-tree helpers import psutil when called.
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def load_avg() -> list[float]:
    """``os.getloadavg()``: the 1, 5 and 15 minute load averages, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


class RunInfo:
    """The load average at the start and end of a bench, and its own CPU seconds.

    Create it first thing in ``main``; :meth:`figures` gives the keys every bench prints:
    ``load_avg_at_start`` and ``load_avg_at_end`` (1, 5, 15 min), ``load_avg_1m_at_start``,
    ``cpu_count``, ``bench_wall_s``, ``bench_cpu_s`` (this process: user + system, every
    thread) and ``bench_children_cpu_s`` (its children that have exited and been waited for,
    ``RUSAGE_CHILDREN``).
    """

    def __init__(self) -> None:
        self.load_at_start = load_avg()
        self.cpu_at_start = own_cpu_seconds()
        self.wall_at_start = time.perf_counter()

    def figures(self) -> dict:
        own, children = own_cpu_seconds()
        return {
            "load_avg_at_start": self.load_at_start,
            "load_avg_at_end": load_avg(),
            "load_avg_1m_at_start": self.load_at_start[0],
            "cpu_count": os.cpu_count(),
            "bench_wall_s": round(time.perf_counter() - self.wall_at_start, 2),
            "bench_cpu_s": round(own - self.cpu_at_start[0], 2),
            "bench_children_cpu_s": round(children - self.cpu_at_start[1], 2),
        }


def own_cpu_seconds() -> tuple[float, float]:
    """(CPU seconds of this process, every thread; of its exited, waited-for children), user +
    system each (``getrusage``)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def tree(pid: int) -> list[psutil.Process]:
    """Process ``pid`` and every live descendant (those that vanish meanwhile are left out)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(procs: Iterable[psutil.Process]) -> float:
    """User + system CPU seconds of ``procs``, each with its exited, waited-for children.

    A process that exited and was waited for is counted in its parent's ``children_*`` times,
    and a live one only in its own, so a whole tree (:func:`tree`) is counted once.
    """
    import psutil

    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` of process ``pid``'s whole live tree (a kernel and its JVM, say)."""
    return cpu_seconds(tree(pid))


def vm_hwm(pid: int) -> int:
    """Peak resident memory of a live process in bytes (``VmHWM``, kept by the kernel); 0 if
    it is gone or has none (a kernel thread)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def tree_peak_rss(pid: int) -> int:
    """Sum of each live process's own peak RSS (``VmHWM``) in ``pid``'s tree, in bytes.

    Pages shared between processes count once per process, so this is an upper bound of the
    tree's peak; read it while the processes still live (before a shutdown).
    """
    return sum(vm_hwm(p.pid) for p in tree(pid))


class PeakMemory(threading.Thread):
    """Peak memory of a process tree over a run that may be shorter than any interval.

    ``peak_rss``: the sum over every process seen of its own peak RSS (``VmHWM``: a counter
    the kernel keeps, so no peak between readings is missed; it is read every ``hwm_every``
    seconds and at each :meth:`sample`, as long as the process lives). ``peak_pss``: the
    largest sum of PSS (shared pages counted once) seen, read every ``pss_every`` seconds
    (reading smaps costs a few ms a process) and at each :meth:`sample`: :meth:`start` takes
    one at once and :meth:`stop` one at the end, and a bench calls :meth:`sample` where it
    knows every process of interest is alive (its first and last batch, say).
    """

    def __init__(self, pid: int | None = None, hwm_every: float = 0.05, pss_every: float = 0.25):
        super().__init__(daemon=True)
        self.pid = os.getpid() if pid is None else pid
        self.hwm_every = hwm_every
        self.pss_every = pss_every
        self.hwm: dict[int, int] = {}
        self.peak_pss = 0
        self.first_pss = 0  # the first reading's (from start(): before the work begins)
        self.pss_samples = 0
        self.processes_seen: set[int] = set()
        self._lock = threading.Lock()
        self._done = threading.Event()

    @property
    def peak_rss(self) -> int:
        return sum(self.hwm.values())

    def sample(self, pss: bool = True) -> None:
        """Read every live process's ``VmHWM`` now (and the tree's PSS with ``pss``)."""
        import psutil

        procs = tree(self.pid)
        with self._lock:
            for proc in procs:
                self.processes_seen.add(proc.pid)
                self.hwm[proc.pid] = max(self.hwm.get(proc.pid, 0), vm_hwm(proc.pid))
            if not pss:
                return
            total = 0
            for proc in procs:
                try:
                    total += proc.memory_full_info().pss
                except psutil.Error:
                    continue
            self.peak_pss = max(self.peak_pss, total)
            if not self.pss_samples:
                self.first_pss = total
            self.pss_samples += 1

    def start(self) -> None:
        self.sample()
        super().start()

    def run(self) -> None:
        last_pss = time.monotonic()
        while not self._done.wait(self.hwm_every):
            due = time.monotonic() - last_pss >= self.pss_every
            self.sample(pss=due)
            if due:
                last_pss = time.monotonic()

    def stop(self) -> None:
        """End the sampling thread and take a last sample."""
        self._done.set()
        self.join()
        self.sample()


@dataclass
class Measured:
    """One child process run to its end: what :func:`run_measured` returns."""

    returncode: int
    wall_s: float
    cpu_s: float  # user + system of the child and its own waited-for children
    peak_rss: int  # bytes: the child's ru_maxrss (the largest of it and its reaped children)
    stdout: str
    stderr_tail: str


def run_measured(argv: Sequence[str], check: bool = True, **popen: object) -> Measured:
    """Run ``argv`` to its end; its own wall time, CPU seconds and peak RSS.

    The child is reaped with ``os.wait4``, so its resource usage is its own, not mixed with
    other children's as ``RUSAGE_CHILDREN`` would be. stdout is captured as text; stderr goes
    to a temporary file (its tail is kept, and shown if ``check`` and the child failed).
    """
    with tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, **popen)
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-4000:].decode(errors="replace")
    done = Measured(
        returncode=proc.returncode,
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_rss=usage.ru_maxrss * 1024,
        stdout=stdout,
        stderr_tail=tail,
    )
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, list(argv), stdout, tail)
    return done
