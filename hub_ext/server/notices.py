"""Notices to the student of one single-user server (e.g. "your idle GPU will be taken back").

The hub's GPU monitor posts a notice to ``POST <server>/scalelab/api/notice``; the server keeps
the latest one in a JSON file whose path its kernels get as ``SCALELAB_NOTICE_FILE``, and each
kernel prints a new notice (once) before the student's next cell
(:mod:`scalelab.kernels.notices`). ``GET`` returns the latest notice. Both need the server's
own authentication: its user, or a hub token with ``access:servers`` on it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import APIHandler
from tornado import web

from scalelab import envvars
from scalelab.common.atomicfile import write_atomic

#: Longest notice accepted, in characters.
MAX_NOTICE_CHARS = 2000


def write_notice(path: str | Path, message: str, now: float | None = None) -> dict[str, Any]:
    """Replace the notice in ``path`` atomically (temporary file, then rename).

    Returns
    -------
    dict
        ``{"id": <hex>, "message": str, "at": seconds since the epoch}``, as written.
    """
    notice = {"id": uuid.uuid4().hex, "message": message, "at": time.time() if now is None else now}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(notice))
    return notice


def read_notice(path: str | Path) -> dict[str, Any] | None:
    """The notice in ``path``, or None when there is none (or it cannot be read)."""
    try:
        notice = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return notice if isinstance(notice, dict) and "message" in notice else None


def clear_notice(path: str | Path) -> bool:
    """Remove the notice in ``path``; True when there was one."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        return False
    return True


def notice_path(runtime_dir: str) -> str:
    """``$SCALELAB_NOTICE_FILE``, else ``<runtime dir>/scalelab-notice-<pid>.json``."""
    return os.environ.get(envvars.NOTICE_FILE) or str(
        Path(runtime_dir) / f"scalelab-notice-{os.getpid()}.json"
    )


class NoticeHandler(APIHandler):
    """``GET``/``POST``/``DELETE /scalelab/api/notice`` of a single-user server."""

    _track_activity = False  # the hub's monitor posting a warning is not the student's activity

    @web.authenticated
    async def get(self):
        self.finish(json.dumps(read_notice(self.settings["scalelab_notice_file"])))

    @web.authenticated
    async def post(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, 'the body is not JSON: send {"message": "..."}') from None
        message = body.get("message") if isinstance(body, dict) else None
        if not isinstance(message, str) or not message.strip():
            raise web.HTTPError(400, 'a notice needs a non-empty "message" string')
        if len(message) > MAX_NOTICE_CHARS:
            raise web.HTTPError(400, f"a notice has at most {MAX_NOTICE_CHARS} characters")
        notice = write_notice(self.settings["scalelab_notice_file"], message)
        self.log.warning("ScaleLab notice to the student: %s", message)
        self.set_status(201)
        self.finish(json.dumps(notice))

    @web.authenticated
    async def delete(self):
        clear_notice(self.settings["scalelab_notice_file"])
        self.set_status(204)
        self.finish()


def setup(serverapp: Any) -> None:
    """Register the handler on ``serverapp`` and export the notice file to its kernels."""
    path = notice_path(serverapp.runtime_dir)
    os.environ[envvars.NOTICE_FILE] = path  # kernels started from now on inherit it
    serverapp.web_app.settings["scalelab_notice_file"] = path
    base = serverapp.web_app.settings["base_url"].rstrip("/")
    serverapp.web_app.add_handlers(".*$", [(f"{base}/scalelab/api/notice", NoticeHandler)])
