"""Who ``scalelab up``'s servers run as: a system user per student, or one shared identity.

Run by root: a system user per student (:mod:`scalelab.spawner.system_users`); otherwise, or
with ``--shared-identity``, a single-user trial as the user who ran ``scalelab up``.
:func:`choose_identity` is pure; :func:`blocked_for_others` reads file modes.
Why: docs/design-notes.md, scalelab.commands.identity.
"""

from __future__ import annotations

import ipaddress
import os
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from scalelab.commands.errors import UpError


@dataclass(frozen=True)
class Identity:
    """The decision: ``system_users`` (a system user per student) and the banner's one line."""

    system_users: bool
    banner: str


def is_loopback(ip: str) -> bool:
    """Whether ``ip`` (an address or ``localhost``) serves this machine only (pure)."""
    if ip == "localhost":
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def choose_identity(
    *, euid: int, user: str, ip: str, shared_identity: bool, blocked: str | None
) -> Identity:
    """Decide who the servers run as (pure).

    Parameters
    ----------
    euid, user
        Effective uid and name of the user running ``scalelab up``.
    ip
        The address the hub serves on (``--ip``).
    shared_identity
        The operator's ``--shared-identity``: every login shares ``user``'s identity, knowingly.
    blocked
        Why students' system users could not run ScaleLab (a folder of the install or the state
        folder that other users cannot enter, from :func:`blocked_for_others`), or None.

    Returns
    -------
    Identity
        ``system_users`` True when run by root with nothing blocked and no ``--shared-identity``.

    Raises
    ------
    UpError
        Servers would share one identity while the hub serves beyond loopback, or would run as
        root, and the operator did not say ``--shared-identity``: the message says why and both
        ways out.
    """
    if euid == 0 and not shared_identity and blocked is None:
        return Identity(
            True,
            "Each student runs as a system user of their own (jupyter-<name>, home mode 0700).",
        )
    if shared_identity:
        why = "(--shared-identity)"
    elif euid != 0:
        why = "(not run by root, so no system user per student can be made)"
    else:
        why = f"(students' system users could not run ScaleLab: {blocked})"
    trial = f"Single-user trial: every login runs as {user} and can read the others' work {why}."
    if euid == 0 and not shared_identity and is_loopback(ip):
        raise UpError(
            f"Every login would run as root {why}: move ScaleLab and its state folder where "
            "other users can enter them, or run every server as root on purpose with "
            "--shared-identity."
        )
    if not shared_identity and not is_loopback(ip):
        fix = (
            "move ScaleLab and its state folder where other users can enter them"
            if euid == 0
            else "run scalelab up as root for a system user per student"
        )
        raise UpError(
            f"--ip {ip} would serve other machines, but every login would run as {user} "
            f"{why}: {fix}, or accept one shared identity with --shared-identity."
        )
    return Identity(False, trial)


def install_paths() -> list[Path]:
    """The folders of this ScaleLab a student's system user must reach to run it: the Python
    environment, its interpreter's real folder, and the ``scalelab`` package (an editable install
    lives in its checkout)."""
    return [
        Path(sys.prefix),
        Path(sys.executable).resolve().parent,
        Path(__file__).resolve().parents[1],
    ]


def blocked_for_others(paths: Iterable[Path]) -> str | None:
    """The first folder that users other than its owner and group cannot enter, or None.

    For each path, every ancestor must let others search it (``o+x``) and the path itself read
    and search it (``o+rx``): what a student's system user needs to run ScaleLab's Python and
    reach their home. A path that does not exist yet (ScaleLab makes it, with its own modes) needs
    only its existing ancestors searchable.

    Returns
    -------
    str or None
        E.g. ``"/root (mode 0700)"``.
    """
    for given in paths:
        path = Path(os.path.abspath(given))
        while not path.exists() and path != path.parent:
            path = path.parent
        for folder in [path, *path.parents]:
            readable = folder == path and path == Path(os.path.abspath(given))
            need = stat.S_IXOTH | (stat.S_IROTH if readable else 0)
            mode = folder.stat().st_mode
            if mode & need != need:
                return f"{folder} (mode {stat.S_IMODE(mode):04o})"
    return None
