"""Live logs of users' servers for ops: an admin-only hub page and a JSON-lines endpoint.

``GET /hub/api/scalelab/logs/<user>[/<server>]`` (JSON lines; scope ``admin:servers``),
``.../logfiles/<user>`` (the log names) and the page ``GET /hub/scalelab/logs/<user>[/<server>]``
serve the log files of :mod:`scalelab.spawner.server_logs`, which outlive their servers.
Why: docs/design-notes.md, scalelab.hub_ext.hub.server_logs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from tornado import web
from tornado.iostream import StreamClosedError

from scalelab.common.logfiles import LOG_NAME
from scalelab.spawner.server_logs import server_log_path

#: Seconds between looks at a followed log for new lines.
FOLLOW_POLL_S = 0.5
#: Most bytes read from a log per look.
CHUNK_BYTES = 1 << 20


def read_lines(path: Path, offset: int) -> tuple[list[tuple[str, int]], int]:
    """Complete lines of ``path`` from byte ``offset`` (pure apart from the read).

    Returns
    -------
    (lines, next_offset)
        Each line without its newline, with the offset just after it; ``next_offset`` is where
        the next read starts (a trailing line without its newline yet is left for later).
    """
    with open(path, "rb") as log:
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
        if log_name:  # another log of the user's servers: a Spark driver's
            if not LOG_NAME.match(log_name):
                raise web.HTTPError(404, "no such log: names look like spark-driver-1234.log")
            path = path.parent / log_name
        if not path.is_file():
            raise web.HTTPError(404, "no log of %s/%s yet", user_name, server_name or "")
        self.set_header("Content-Type", "application/x-ndjson")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")  # a reverse proxy must not hold lines back
        while True:
            lines, offset = read_lines(path, offset)
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
        names = sorted(p.name for p in folder.glob("*.log") if LOG_NAME.match(p.name))
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
