"""Where a process is in the cgroup file systems, read from ``/proc`` (for the tests that check a
server's cgroup: the spawner itself only writes)."""

from __future__ import annotations

from pathlib import Path

from scalelab.spawner.cgroups import CGROUP_ROOT


def cgroup_of(pid: int, root: Path = CGROUP_ROOT) -> dict[str, Path]:
    """The cgroup folders process ``pid`` is in, ``{controller: folder}`` (``""`` for v2),
    from ``/proc/<pid>/cgroup``.

    Raises
    ------
    OSError
        The process is gone.
    """
    out: dict[str, Path] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            if controller.startswith("name="):  # a named hierarchy (systemd's), no controller
                continue
            base = root if controller == "" else root / controller
            out[controller] = base / path.lstrip("/")
    return out
