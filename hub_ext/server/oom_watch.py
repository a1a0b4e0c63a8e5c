"""A kernel killed for memory, told to its student: the server watches its own cgroup's OOM kills.

A local server runs in a cgroup of its own with the memory limit of its profile
(:mod:`scalelab.spawner.cgroups`; the spawner names its folder in ``SCALELAB_MEMORY_CGROUP``).
When the kernel's OOM killer ends one of its processes (a kernel, a Spark driver's JVM, a
DataLoader worker), JupyterLab shows only "the kernel appears to have died". :class:`OOMWatch`
reads the cgroup's ``oom_kill`` count every :data:`INTERVAL_S` seconds and, when it grew,
writes a notice (:mod:`scalelab.hub_ext.server.notices`) that every kernel of the server prints
before the student's next cell: the limit, the peak reached, and what to do. Ops see the same
count on the hub (``scalelab_server_oom_kills``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tornado.ioloop import PeriodicCallback

from scalelab import envvars
from scalelab.common.memory_cgroup import MemoryEvents, read_memory_events
from scalelab.hub_ext.server.notices import write_notice

#: Seconds between two looks at the cgroup's counters.
INTERVAL_S = 3.0
GIB = 2**30


def oom_message(events: MemoryEvents, kills: int) -> str:
    """What the student reads after ``kills`` processes of their server were killed for memory
    (pure); ``events`` are the cgroup's figures now."""
    what = (
        "A process of your server was" if kills == 1 else f"{kills} processes of your server were"
    )
    limit = f" of {events.limit_bytes / GIB:.1f} GiB" if events.limit_bytes else ""
    peak = f" (it reached {events.peak_bytes / GIB:.1f} GiB)" if events.peak_bytes else ""
    return (
        f"{what} killed for memory: your server's memory limit{limit} was reached{peak}. A "
        "kernel that died restarts empty: run its notebook again from the top. To fit: load less "
        "at once (smaller batches, fewer columns, a sample), del large arrays you no longer "
        "need, call spark.stop() in notebooks you are done with, or start your server with a "
        "profile that has more memory. Your files and your other kernels are untouched."
    )


class OOMWatch:
    """Writes a notice when the cgroup at ``folder`` counts a new OOM kill.

    Parameters
    ----------
    folder
        The server's memory cgroup folder (from ``/proc/self/cgroup``).
    notice_file
        The server's notice file (``scalelab_notice_file``).
    """

    def __init__(self, folder: Path, notice_file: str, log: Any):
        self.folder = folder
        self.notice_file = notice_file
        self.log = log
        os.listdir(folder)  # readable, or OSError now rather than a silent 0 at each look
        self.seen = read_memory_events(folder).oom_kills

    def check(self) -> str | None:
        """Look once; returns the notice written, or None when no new kill was counted."""
        events = read_memory_events(self.folder)
        new = events.oom_kills - self.seen
        self.seen = events.oom_kills
        if new <= 0:
            return None
        message = oom_message(events, new)
        write_notice(self.notice_file, message)
        self.log.warning("ScaleLab: %d process(es) killed for memory in %s", new, self.folder)
        return message


def setup(serverapp: Any) -> OOMWatch | None:
    """Start the watch when the spawner gave the server a cgroup of its own
    (``SCALELAB_MEMORY_CGROUP``); None otherwise (nothing of the server's own to watch)."""
    folder = os.environ.get(envvars.MEMORY_CGROUP)
    notice_file = serverapp.web_app.settings.get("scalelab_notice_file")
    if not folder or not notice_file:
        return None
    try:
        watch = OOMWatch(Path(folder), notice_file, serverapp.log)
    except OSError as exc:  # the server goes on without the notice
        serverapp.log.warning("ScaleLab cannot watch %s for kills for memory: %s", folder, exc)
        return None
    PeriodicCallback(watch.check, INTERVAL_S * 1000).start()
    return watch
