"""Users' home folders under ``c.ScaleLabSpawner.home_root`` (``scalelab up``'s homes).

:func:`make_home` creates ``<home_root>/<user name>`` when a server starts and turns every
``OSError`` (a name too long for the file system, ``home_root`` a file, no permission, a full
disk) into JupyterHub's :class:`~jupyterhub.spawner.SpawnException`: the student and the hub log
get one line naming the folder and the reason, the hub logs no traceback and keeps running.
"""

from __future__ import annotations

import os
from pathlib import Path

from jupyterhub.spawner import SpawnException

#: HTTP status of a spawn refused because the home cannot be made: the hub's side is at fault.
HOME_FAILURE_STATUS = 503


def home_failure(home: str | Path, reason: str) -> SpawnException:
    """The spawn failure for a home folder that cannot be created (pure).

    Parameters
    ----------
    home
        The folder, as the spawner would create it.
    reason
        Why, in words (``OSError.strerror``, e.g. ``"File name too long"``).
    """
    return SpawnException(
        f"Your server cannot start: its home folder {home} cannot be created ({reason}). "
        "Nothing was started; ask the hub's operators to check c.ScaleLabSpawner.home_root.",
        reason="home",
        status_code=HOME_FAILURE_STATUS,
    )


def make_home(home_root: str | Path, user_name: str) -> Path:
    """Create ``<home_root>/<user_name>`` (mode 0700, parents too) if it is missing.

    Returns
    -------
    pathlib.Path
        The home folder (``home_root`` resolved).

    Raises
    ------
    jupyterhub.spawner.SpawnException
        The name does not make a folder directly under ``home_root``, or the folder cannot be
        created (any ``OSError``); the message names the folder and the reason.
    """
    root = Path(home_root)
    home = root / user_name
    try:
        root = root.resolve()
        home = root / user_name
        if home.resolve().parent != root:
            raise home_failure(home, f"the user name {user_name!r} is not a folder name")
        os.makedirs(home, 0o700, exist_ok=True)
    except OSError as exc:
        raise home_failure(home, exc.strerror or str(exc)) from None
    return home
