"""File modes of ``scalelab up``'s state folder: the hub's secrets readable by the hub alone.

The hub's files are its user's alone (0600, ``logs/`` 0700, umask 077); with a system user per
student, what their servers must reach is open for reading. :func:`check_operator_config`
refuses an operator's ``--config`` file that other users could read.
Why: docs/design-notes.md, scalelab.commands.state_modes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from scalelab.commands.state_files import StateFolder

#: The hub process's umask: files 0600, folders 0700.
HUB_UMASK = 0o077


def _chmod(path: Path, mode: int) -> None:
    if path.exists() and not path.is_symlink():
        path.chmod(mode)


def protect_state(
    state: StateFolder, *, system_users: bool, store: Path | None, traversable: bool = False
) -> None:
    """Set the modes above on the state folder (and a local course store).

    Parameters
    ----------
    state
        The state folder (it and ``homes/``, ``logs/`` exist).
    system_users
        Students run as their own system users: open what their servers need to reach.
    store
        The local course store's folder, or None (a remote store).
    traversable
        Another user must reach a folder inside (the Hadoop test cluster's user, ``--hadoop``
        run by root): the state folder is 0711 even without ``system_users``.

    Raises
    ------
    OSError
        A mode cannot be set (the caller words it).
    """
    _chmod(state.root, 0o711 if system_users or traversable else 0o700)
    for secret in (
        state.database, state.cookie_secret, state.config_file, state.gpu_queue,
        state.lock, state.hub_pid, state.proxy_pid, state.run_record, state.hub_ports,
    ):  # fmt: skip
        _chmod(secret, 0o600)
    _chmod(state.logs, 0o700)
    if not system_users:
        return
    _chmod(state.homes, 0o755)
    _open_tree(state.root / "share")
    if store is not None:
        for folder in (store, store / "home", store / "datasets"):
            folder.mkdir(parents=True, exist_ok=True)
            _chmod(folder, 0o755)
        _open_tree(store / "datasets")


def _open_tree(root: Path) -> None:
    """Make ``root``'s folders 0755 and files 0644, links left alone: readable by all, writable
    by the owner (root) alone."""
    if not root.is_dir():
        return
    for folder, dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o644)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]


def check_operator_config(path: str | Path) -> str | None:
    """Why the operator's config file must not be used as it is, or None.

    Returns
    -------
    str or None
        E.g. ``"/srv/hub.py is readable by other users (mode 0644) and may hold passwords:
        chmod 600 /srv/hub.py"``.
    """
    mode = stat.S_IMODE(Path(path).stat().st_mode)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (
            f"the config file {path} is readable by other users (mode {mode:04o}), and the "
            f"students' system users are other users; it may hold passwords: chmod 600 {path}"
        )
    return None
