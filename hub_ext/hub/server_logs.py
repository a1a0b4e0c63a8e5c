"""Live logs of users' servers for ops: an admin-only hub page and a JSON-lines endpoint.

``GET /hub/api/scalelab/logs/<user>[/<server>]`` (JSON lines; scope ``admin:servers``),
``.../logfiles/<user>`` (the log names) and the page ``GET /hub/scalelab/logs/<user>[/<server>]``
serve the log files of :mod:`scalelab.spawner.server_logs`, which outlive their servers, and
the Spark drivers' logs that a server run as the student's system user writes into the student's
own ``~/.scalelab/logs`` (read through folder descriptors, links never followed, only files the
student owns: a planted link to a root-only file serves nothing).
Why: docs/design-notes.md, scalelab.hub_ext.hub.server_logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from jupyterhub.spawner import SpawnException
from tornado import web
from tornado.iostream import StreamClosedError

from scalelab.common.logfiles import LOG_NAME, STUDENT_LOG_FOLDER
from scalelab.spawner.server_logs import server_log_path

#: Seconds between looks at a followed log for new lines.
FOLLOW_POLL_S = 0.5
#: Most bytes read from a log per look.
CHUNK_BYTES = 1 << 20


def read_lines(
    path: Path | Callable[[], BinaryIO], offset: int
) -> tuple[list[tuple[str, int]], int]:
    """Complete lines of ``path`` (or of what the opener ``path`` opens) from byte ``offset``
    (pure apart from the read).

    Returns
    -------
    (lines, next_offset)
        Each line without its newline, with the offset just after it; ``next_offset`` is where
        the next read starts (a trailing line without its newline yet is left for later).
    """
    with path() if callable(path) else open(path, "rb") as log:
        log.seek(offset)
        data = log.read(CHUNK_BYTES)
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    lines, position = [], offset
    for raw in data[: end + 1].split(b"\n")[:-1]:
        position += len(raw) + 1
        lines.append((raw.decode(errors="replace"), position))
    return lines, position


@contextlib.contextmanager
def _student_folder(home: str) -> Iterator[tuple[int, int]]:
    """A descriptor of ``<home>/.scalelab/logs`` and the home's owner's uid, each folder on the
    way opened without following a link and owned by that uid.

    Raises
    ------
    OSError
        A folder is missing, a link (``ELOOP``), not a folder, or owned by someone else.
    """
    fds = [os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)]
    try:
        uid = os.fstat(fds[0]).st_uid
        for part in STUDENT_LOG_FOLDER:
            fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
            if os.fstat(fds[-1]).st_uid != uid:
                raise PermissionError(f"{home}/{part} is not the student's own")
        yield fds[-1], uid
    finally:
        for fd in fds:
            os.close(fd)


def _own_file(folder: int, name: str, uid: int) -> bool:
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:  # removed since the listing
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == uid


def student_log_names(home: str) -> list[str]:
    """Names of the logs in the student's own log folder under ``home`` (regular files the
    student owns); [] where there is none or it is not safely the student's (see
    :func:`_student_folder`)."""
    try:
        with _student_folder(home) as (folder, uid):
            return [
                name
                for name in os.listdir(folder)
                if LOG_NAME.match(name) and _own_file(folder, name, uid)
            ]
    except OSError:
        return []


def open_student_log(home: str, name: str) -> BinaryIO:
    """Open log ``name`` of the student's own log folder under ``home`` for reading.

    Raises
    ------
    OSError
        The folder is not safely the student's, the log is missing, a link, not a regular
        file, or not owned by the student.
    """
    with _student_folder(home) as (folder, uid):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != uid:
        os.close(fd)
        raise PermissionError(f"{name} is not a log file of the student's")
    return os.fdopen(fd, "rb")


def _student_home(handler: BaseHandler, user_name: str) -> str | None:
    """The home of ``user_name`` on the hub's host where their server runs as their own
    system user (ScaleLab's local spawner: its ``home_dir``); None for other spawners."""
    user = handler.find_user(user_name)
    spawner = getattr(user, "spawner", None)
    if not getattr(spawner, "system_users", False):
        return None
    try:
        return spawner.home_dir
    except (KeyError, ValueError, OSError, SpawnException):  # no such account, or name
        return None


def require_user(find_user: Callable[[str], object], log_dir: str, user_name: str) -> None:
    """Raise a 404 naming ``user_name`` when the hub has no such user.

    A user deleted since keeps the logs written while they existed (the files outlive the
    servers), so a user with a log folder passes too.
    """
    if find_user(user_name) is not None:
        return
    if log_dir and server_log_path(log_dir, user_name).parent.is_dir():
        return
    # the name goes in args, not in the format string: a '%' in it must not break the message
    raise web.HTTPError(
        404, "no user %r on this hub: check the name (the admin page lists the users)", user_name
    )


def _log_dir(handler: BaseHandler) -> str:
    spawner = handler.settings["spawner_class"](config=handler.settings["config"])
    return getattr(spawner, "server_log_dir", "")


class ServerLogAPIHandler(APIHandler):
    """``GET /hub/api/scalelab/logs/<user>[/<server>]``: JSON lines, optionally followed."""

    @needs_scope("admin:servers")
    async def get(self, user_name: str, server_name: str = ""):
        log_dir = _log_dir(self)
        if not log_dir:
            raise web.HTTPError(
                404, "server logs are not kept: set c.ScaleLabSpawner.server_log_dir"
            )
        require_user(self.find_user, log_dir, user_name)
        try:
            offset = int(self.get_argument("offset", "0"))
        except ValueError:
            raise web.HTTPError(400, "offset must be a byte offset (an integer >= 0)") from None
        if offset < 0:
            raise web.HTTPError(400, "offset must be a byte offset (an integer >= 0)")
        follow = self.get_argument("follow", "0") in ("1", "true", "yes")
        path = server_log_path(log_dir, user_name, server_name or "")
        log_name = self.get_argument("log", "")
        source: Path | Callable[[], BinaryIO] = path
        if log_name:  # another log of the user's servers: a Spark driver's
            if not LOG_NAME.match(log_name):
                raise web.HTTPError(404, "no such log: names look like spark-driver-1234.log")
            source = path = path.parent / log_name
            home = None if path.is_file() else _student_home(self, user_name)
            if home and log_name in student_log_names(home):
                source = lambda: open_student_log(home, log_name)  # noqa: E731
        if source is path and not path.is_file():
            raise web.HTTPError(404, "no log of %s/%s yet", user_name, server_name or "")
        self.set_header("Content-Type", "application/x-ndjson")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")  # a reverse proxy must not hold lines back
        while True:
            try:
                lines, offset = read_lines(source, offset)
            except OSError as exc:  # a student's log removed or replaced while followed
                raise web.HTTPError(404, "the log %s is gone: %s", log_name, exc) from None
            for line, after in lines:
                record = {
                    "user": user_name,
                    "server": server_name or "",
                    "line": line,
                    "offset": after,
                }
                self.write(json.dumps(record) + "\n")
            if not follow:
                return
            try:
                await self.flush()
            except StreamClosedError:
                return
            if not lines:
                await asyncio.sleep(FOLLOW_POLL_S)


class ServerLogListHandler(APIHandler):
    """``GET /hub/api/scalelab/logfiles/<user>``: ``{"logs": [names]}``, the user's logs (the
    servers' and their Spark drivers'), each readable with ``?log=<name>`` above."""

    @needs_scope("admin:servers")
    async def get(self, user_name: str):
        log_dir = _log_dir(self)
        if not log_dir:
            raise web.HTTPError(
                404, "server logs are not kept: set c.ScaleLabSpawner.server_log_dir"
            )
        require_user(self.find_user, log_dir, user_name)
        folder = server_log_path(log_dir, user_name).parent
        names = {p.name for p in folder.glob("*.log") if LOG_NAME.match(p.name)}
        home = _student_home(self, user_name)
        names = sorted(names | set(student_log_names(home) if home else ()))
        self.finish({"logs": names})


class ServerLogPageHandler(BaseHandler):
    """``GET /hub/scalelab/logs/<user>[/<server>]``: the log, followed live (admins)."""

    @web.authenticated
    @needs_scope("admin-ui")
    async def get(self, user_name: str, server_name: str = ""):
        require_user(self.find_user, _log_dir(self), user_name)
        html = await self.render_template(
            "server_logs.html", log_user=user_name, log_server=server_name or ""
        )
        self.finish(html)


def handlers() -> list[tuple[str, type]]:
    """Routes for ``c.JupyterHub.extra_handlers`` (mounted under ``/hub/``)."""
    name = r"([^/]+)"
    return [
        (rf"/api/scalelab/logs/{name}(?:/{name})?", ServerLogAPIHandler),
        (rf"/api/scalelab/logfiles/{name}", ServerLogListHandler),
        (rf"/scalelab/logs/{name}(?:/{name})?", ServerLogPageHandler),
    ]
