"""A system user per student, made on first start (as The Littlest JupyterHub does).

With ``system_users = True``, student ``alice`` gets ``jupyter-alice`` (no login shell, its own
group, a 0700 home), made with ``useradd`` and never removed. :func:`system_user_name` is pure;
:func:`ensure_system_user` and :func:`private_folder` need root; failures are ``SpawnException``.
Why: docs/design-notes.md, scalelab.spawner.system_users.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import threading
from pathlib import Path

from jupyterhub.spawner import SpawnException

#: TLJH's prefix of the students' system users.
DEFAULT_PREFIX = "jupyter-"
#: Written into the GECOS field of every user ScaleLab makes: only those it may change later.
COMMENT = "ScaleLab student"
#: A system user name: lowercase letters, digits, ``_``, ``.`` and ``-``, not starting with
#: ``-`` or a digit, at most 32 characters (``useradd``'s limit on Debian).
SYSTEM_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
#: The login shell of the students' users: they run servers, never log in.
NO_LOGIN = "/usr/sbin/nologin"
#: HTTP status of a spawn refused because the system user cannot be made (the hub's fault).
USER_FAILURE_STATUS = 503

_lock = threading.Lock()  # useradd and usermod take /etc/passwd's lock: one at a time


def system_user_name(prefix: str, user: str) -> str:
    """The system user of JupyterHub user ``user``: ``prefix + user`` (pure).

    Raises
    ------
    SpawnException
        The result is no valid system user name (too long: more than 32 characters, or a
        character ``useradd`` refuses); the message names it and the rule.
    """
    name = f"{prefix}{user}"
    if not SYSTEM_NAME.match(name):
        raise SpawnException(
            f"Your server cannot start: the system user {name!r} for you is not a valid name "
            "(at most 32 lowercase letters, digits, '_', '.' or '-'). Ask the hub's operators to "
            "shorten c.ScaleLabSpawner.system_user_prefix or your user name.",
            reason="system-user",
            status_code=400,
        )
    return name


def _fail(name: str, reason: str) -> SpawnException:
    return SpawnException(
        f"Your server cannot start: the system user {name} cannot be made ({reason}). Nothing "
        "was started; ask the hub's operators.",
        reason="system-user",
        status_code=USER_FAILURE_STATUS,
    )


def _run(name: str, argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _fail(name, f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
        raise _fail(name, f"{' '.join(argv[:1])} exited {done.returncode}: {last[0]}")


def ensure_system_user(name: str, home: str) -> pwd.struct_passwd:
    """Make system user ``name`` with home ``home`` if it does not exist; return its entry.

    A user that exists is kept; if ScaleLab made it (GECOS :data:`COMMENT`) and its home is
    another folder (a new state folder), its home is moved to ``home`` in ``/etc/passwd``
    (``usermod --home``; files are not moved). The home folder itself is made by
    :func:`private_folder`.

    Raises
    ------
    SpawnException
        Not root, ``useradd`` missing or failing, or the user exists, was not made by ScaleLab
        and has another home (ScaleLab does not take over an account it did not make).
    """
    with _lock:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            entry = None
        if entry is not None:
            if entry.pw_dir == home:
                return entry
            if not entry.pw_gecos.startswith(COMMENT):
                raise _fail(
                    name,
                    f"an account of that name exists with home {entry.pw_dir}, not made by "
                    "ScaleLab; rename it or set another c.ScaleLabSpawner.system_user_prefix",
                )
            _run(name, [_tool("usermod"), "--home", home, name])
            return pwd.getpwnam(name)
        if os.geteuid() != 0:
            raise _fail(name, "the hub is not run by root")
        argv = [
            _tool("useradd"),
            "--home-dir", home, "--no-create-home", "--shell", NO_LOGIN,
            "--user-group", "--comment", COMMENT, name,
        ]  # fmt: skip
        _run(name, argv)
        return pwd.getpwnam(name)


def _tool(command: str) -> str:
    found = shutil.which(command, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
    if not found:
        raise _fail(command, f"`{command}` is not installed: apt-get install passwd")
    return found


def private_folder(path: str | Path, entry: pwd.struct_passwd) -> Path:
    """Create ``path`` if missing and make it ``entry``'s own, mode 0700 (parents: root's).

    Used for a student's home and for their folder in a local course store.

    Raises
    ------
    SpawnException
        The folder cannot be made or given (any ``OSError``); the message names it.
    """
    folder = Path(path)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        if folder.is_symlink():
            raise OSError(f"{folder} is a symbolic link")
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        os.chmod(folder, 0o700)
    except OSError as exc:
        raise _fail(entry.pw_name, f"its folder {folder}: {exc.strerror or exc}") from None
    return folder
