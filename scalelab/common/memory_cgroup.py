"""What a memory cgroup says about its limit: the OOM kills, the limit and the peak (cgroup v1 or
v2), read by the hub (:mod:`scalelab.spawner.health_metrics`) and by the server itself
(:mod:`scalelab.hub_ext.server.oom_watch`). Sources: the kernel's
Documentation/admin-guide/cgroup-v1/memory.rst and cgroup-v2.rst.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MemoryEvents:
    """What a cgroup's memory controller says about its limit (bytes; None where unknown).

    Attributes
    ----------
    oom_kills
        Processes the kernel's OOM killer ended in the cgroup since it was made (v1
        ``memory.oom_control``'s ``oom_kill``, kernel 4.13 on; v2 ``memory.events``').
    limit_bytes
        The limit (v1 ``memory.limit_in_bytes``, v2 ``memory.max``; None: no limit).
    peak_bytes
        The most the cgroup used (v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``,
        kernel 5.19 on).
    """

    oom_kills: int
    limit_bytes: int | None
    peak_bytes: int | None


#: A limit this high means none (v1's "unlimited" is the largest page-aligned int64).
NO_LIMIT_BYTES = 2**62


def parse_memory_events(files: dict[str, str]) -> MemoryEvents:
    """:class:`MemoryEvents` from a memory cgroup's files (name -> text; v1 or v2 names; a
    missing file is unknown) (pure)."""

    def number(text: str | None) -> int | None:
        if text is None or text.strip() in ("", "max"):
            return None
        value = int(text.split()[0])
        return None if value >= NO_LIMIT_BYTES else value

    kills = 0
    for name in ("memory.oom_control", "memory.events"):
        for line in files.get(name, "").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                kills = int(value)
    limit = number(files.get("memory.limit_in_bytes", files.get("memory.max")))
    peak = number(files.get("memory.max_usage_in_bytes", files.get("memory.peak")))
    return MemoryEvents(kills, limit, peak)


def read_memory_events(folder: Path) -> MemoryEvents:
    """:func:`parse_memory_events` of the files in ``folder`` (readable by the cgroup's own
    processes: its files are 0644)."""
    files = {}
    for name in (
        "memory.oom_control",
        "memory.events",
        "memory.limit_in_bytes",
        "memory.max",
        "memory.max_usage_in_bytes",
        "memory.peak",
    ):
        try:
            files[name] = (folder / name).read_text()
        except OSError:
            continue
    return parse_memory_events(files)
