"""Children die with their parent (PR_SET_PDEATHSIG); orphans come back (PR_SET_CHILD_SUBREAPER).

:func:`die_with_parent`, as Popen's ``preexec_fn``, has the kernel send the child SIGTERM when
its parent dies; :func:`become_subreaper` makes orphans of the process's children its own, so it
can still stop them. Both are ``prctl(2)`` through ctypes.
Why: docs/design-notes.md, scalelab.common.pdeathsig.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
#: ``PR_SET_CHILD_SUBREAPER`` from ``<linux/prctl.h>`` (Linux 3.4).
PR_SET_CHILD_SUBREAPER = 36


def _prctl() -> Callable[..., int]:
    """libc's ``prctl``, typed (look it up before a fork, not in the child)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux for ``sig`` in this process when its parent dies (kept across ``exec``).

    Returns
    -------
    bool
        True when set; False off Linux or where ``prctl`` cannot be called.
    """
    return _set(PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (``PR_SET_CHILD_SUBREAPER``).

    A descendant whose parent exits is then re-parented to this process rather than to PID 1,
    so it stays in ``psutil.Process().children(recursive=True)``; this process must reap those
    that exit (``os.waitpid``), or they stay zombies until it exits. It holds for the whole
    process (every thread) and is not inherited by children.

    Returns
    -------
    bool
        True when set; False off Linux or where ``prctl`` cannot be called.
    """
    return _set(PR_SET_CHILD_SUBREAPER, 1)


def _set(option: int, value: int) -> bool:
    """``prctl(option, value)``: True when set; False off Linux or where it cannot be called."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _prctl()(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies.

    Call it (and ``Popen``) from the thread that will live as long as the child should: the
    kernel ties ``PR_SET_PDEATHSIG`` to the thread that forked, not to the whole process. It is
    fine together with ``start_new_session=True``. If this process dies before the child set the
    signal up, the child sees another parent and exits at once (status 1), so that no window
    leaves an orphan.

    Returns
    -------
    callable or None
        The function for ``subprocess.Popen(preexec_fn=...)``; None off Linux, where there is no
        such call (the child is then not tied to its parent).

    Raises
    ------
    OSError
        In the child, if ``prctl`` refuses (it does not for a valid signal); ``Popen`` reports it.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = _prctl()  # looked up before the fork, not after
    parent = os.getpid()
    number = int(sig)

    def set_pdeathsig() -> None:
        # Until exec, the child still runs Python with the parent's handlers: a Python handler
        # would only set a flag that exec then forgets, so the signal must act by default here.
        try:
            signal.signal(number, signal.SIG_DFL)
        except ValueError:  # not the main thread: keep the handler, the window stays tiny
            pass
        if prctl(PR_SET_PDEATHSIG, number, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
        if os.getppid() != parent:  # the parent died before prctl: nobody will signal us
            os._exit(1)

    return set_pdeathsig
