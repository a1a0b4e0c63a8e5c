"""Who the end of term retires, and what of each student (pure; the I/O is in ``retire.py``).

A student is a hub user who is not an admin. What each one has is read as the hub made it
(:mod:`scalelab.spawner.local`): a system user ``<system_user_prefix><name>`` that ScaleLab
made (GECOS :data:`~scalelab.spawner.system_users.COMMENT`) with its home; else, with
``home_root``, the folder ``<home_root>/<name>``; else an existing account of the student's
own name, whose home is archived and kept with the account (ScaleLab did not make them).
The student's folder in the course store is ``home/<name>``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from scalelab.spawner.system_users import COMMENT, SYSTEM_NAME


@dataclass(frozen=True)
class HubUser:
    """A user in the hub's database: name, admin flag, JupyterHub group names."""

    name: str
    admin: bool = False
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Account:
    """A system account as ``/etc/passwd`` has it: home folder and GECOS field."""

    home: str
    gecos: str


@dataclass(frozen=True)
class Retirement:
    """What retiring one student archives and removes.

    ``home``: the home folder to archive (None: the student has none here); ``remove_home``:
    whether it is removed after (False for an account ScaleLab did not make);
    ``system_user``: the account ScaleLab made, deleted with ``userdel`` (None: none to delete);
    ``kept``: why something is left in place, for the report; ``store_home``: the student's
    folder relative to the course store's root.
    """

    user: str
    home: str | None
    remove_home: bool
    system_user: str | None
    store_home: str
    kept: str = ""


class PlanError(ValueError):
    """The students asked for cannot be retired; the message names which and why."""


def choose_students(
    users: Iterable[HubUser], names: Sequence[str] = (), group: str | None = None
) -> list[HubUser]:
    """The students to retire, sorted by name: ``names`` (each a non-admin hub user), else the
    non-admin members of JupyterHub group ``group``, else every non-admin hub user.

    Raises
    ------
    PlanError
        A name is no hub user or an admin (admins are never retired), or ``group`` has no
        member in the hub.
    """
    known = {user.name: user for user in users}
    if names:
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise PlanError(f"no hub user named {', '.join(unknown)}: nothing was changed")
        admins = sorted(n for n in set(names) if known[n].admin)
        if admins:
            raise PlanError(
                f"{', '.join(admins)} is an admin, never retired as a student: remove their "
                "admin flag first, or leave them out (nothing was changed)"
            )
        return [known[n] for n in sorted(set(names))]
    chosen = [u for u in known.values() if not u.admin]
    if group is not None:
        members = [u for u in known.values() if group in u.groups]
        if not members:
            raise PlanError(f"the hub has no group {group!r} with members: nothing was changed")
        chosen = [u for u in members if not u.admin]
    return sorted(chosen, key=lambda u: u.name)


def plan_retirement(
    name: str,
    *,
    home_root: str,
    system_user_prefix: str,
    account: Callable[[str], Account | None],
) -> Retirement:
    """What retiring student ``name`` archives and removes.

    Parameters
    ----------
    name
        The JupyterHub user name.
    home_root
        ``c.ScaleLabSpawner.home_root`` (empty: homes are the accounts' own).
    system_user_prefix
        ``c.ScaleLabSpawner.system_user_prefix``.
    account
        The passwd entry of a system user name, or None where there is none (``pwd``'s view,
        passed in so that this stays pure).
    """
    store_home = posixpath.join("home", name)
    system = f"{system_user_prefix}{name}"
    made = account(system) if SYSTEM_NAME.match(system) else None
    if made is not None and made.gecos.startswith(COMMENT):
        return Retirement(name, made.home, True, system, store_home)
    if home_root:
        home = posixpath.join(home_root.rstrip("/") or "/", name)
        return Retirement(name, home, True, None, store_home)
    own = account(name) if SYSTEM_NAME.match(name) else None
    if own is not None:
        kept = f"account {name} and its home {own.home} kept: not made by ScaleLab"
        return Retirement(name, own.home, False, None, store_home, kept)
    return Retirement(name, None, False, None, store_home, "no home on this host")
