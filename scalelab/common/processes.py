"""Whether a process runs, where a zombie (ended, not yet reaped by its parent) does not.

``kill(pid, 0)`` and ``psutil.pid_exists`` both succeed on a zombie; a process that ended while
its parent was gone stays one for as long as its new parent (PID 1 in a container without an
init) does not reap it.
"""

from __future__ import annotations

import psutil


def pid_runs(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie.

    A process this user may not inspect (``psutil.AccessDenied``) counts as running: it
    exists. Reads ``/proc/<pid>/stat`` through psutil; raises nothing."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
