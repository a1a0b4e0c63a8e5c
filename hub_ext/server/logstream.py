"""Live logs in the single-user server: the server's own log and each Spark driver's, followed live.

Handlers at ``<base_url>scalelab/logs`` (a page), ``scalelab/api/logs`` (the list) and
``scalelab/api/logs/<name>`` (``text/event-stream``) serve the plain ``*.log`` files directly in
the log folder while they grow (resource ``scalelab_logs``, action ``read``); others are a 404.
Why: docs/design-notes.md, scalelab.hub_ext.server.logstream.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
from pathlib import Path
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import iostream, web

from scalelab import envvars
from scalelab.common.logfiles import LOG_NAME, log_dir
from scalelab.hub_ext.server.warm_kernel import WarmKernelManager

#: Seconds between two looks at a followed file.
POLL_S = 0.25
#: Seconds without new lines after which a comment keeps proxies from closing the stream.
KEEPALIVE_S = 15.0
#: Bytes of a log sent before following it, unless ``?tail=`` says otherwise.
DEFAULT_TAIL = 65536


def log_path(folder: Path, name: str) -> Path | None:
    """``folder/name`` if ``name`` is a servable log there (pure name check, then one stat).

    Returns None for names with separators, ``..``, other suffixes, and for symlinks or
    anything that is not a regular file.
    """
    if not LOG_NAME.match(name):
        return None
    path = folder / name
    if path.is_symlink() or not path.is_file():
        return None
    return path


def list_logs(folder: Path, hidden: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The servable logs in ``folder`` but those named in ``hidden``, newest first: ``name``,
    ``size`` (bytes), ``modified``."""
    if not folder.is_dir():
        return []
    logs = []
    for entry in folder.iterdir():
        if entry.name in hidden or log_path(folder, entry.name) is None:
            continue
        stat = entry.stat()
        logs.append({"name": entry.name, "size": stat.st_size, "modified": stat.st_mtime})
    return sorted(logs, key=lambda log: -log["modified"])


def tail_start(size: int, tail: int) -> int:
    """Offset to start sending from, to send at most the last ``tail`` bytes of ``size``."""
    return max(0, size - max(0, tail))


def add_server_log_file(logger: logging.Logger, folder: Path) -> Path:
    """Also write ``logger`` (the server's log) to ``folder/server.log``; returns that path.

    Nothing is added when this process's stderr already is that file: ScaleLab's spawner with
    ``c.ScaleLabSpawner.server_log_dir`` writes the server's whole output there.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "server.log"
    if _is_stderr(path):
        return path
    if not any(getattr(h, "baseFilename", None) == str(path) for h in logger.handlers):
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(
            logging.Formatter("[%(levelname).1s %(asctime)s %(name)s] %(message)s")
        )
        logger.addHandler(handler)
    return path


def _is_stderr(path: Path) -> bool:
    """True when file descriptor 2 of this process is ``path`` (same device and inode)."""
    try:
        err, target = os.fstat(2), path.stat()
    except OSError:
        return False
    return (err.st_dev, err.st_ino) == (target.st_dev, target.st_ino)


class _LogsMixin:
    auth_resource = "scalelab_logs"

    @property
    def log_folder(self) -> Path:
        return self.settings["scalelab_log_dir"]  # type: ignore[attr-defined]

    def listed(self) -> list[dict[str, Any]]:
        """:func:`list_logs`, less the driver log of the server's warm PySpark kernel (nobody's
        notebook yet: :meth:`WarmKernelManager.hidden_pids`)."""
        manager = self.kernel_manager  # type: ignore[attr-defined]
        pids = manager.hidden_pids() if isinstance(manager, WarmKernelManager) else set()
        return list_logs(self.log_folder, frozenset(f"spark-driver-{pid}.log" for pid in pids))


class LogListHandler(_LogsMixin, APIHandler):
    """``GET scalelab/api/logs``: the logs there are."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        self.finish(json.dumps({"logs": self.listed()}))


class LogStreamHandler(_LogsMixin, JupyterHandler):
    """``GET scalelab/api/logs/<name>``: one log, followed live as server-sent events."""

    _closed = False

    def on_connection_close(self) -> None:
        self._closed = True

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        path = log_path(self.log_folder, name)
        if path is None:
            raise web.HTTPError(404, f"no log {name!r}; the logs are listed at scalelab/api/logs")
        try:
            tail = int(self.get_argument("tail", str(DEFAULT_TAIL)))
        except ValueError:
            raise web.HTTPError(400, "tail must be a number of bytes, e.g. ?tail=65536") from None
        with open(path, "rb") as handle:
            handle.seek(tail_start(os.fstat(handle.fileno()).st_size, tail))
            if self.get_argument("follow", "1") == "0":
                self.set_header("Content-Type", "text/plain; charset=utf-8")
                self.finish(handle.read())
                return
            self.set_header("Content-Type", "text/event-stream")
            self.set_header("Cache-Control", "no-cache")
            self.set_header("X-Accel-Buffering", "no")
            await self._follow(path, handle)

    async def _follow(self, path: Path, handle: Any) -> None:
        pending = b""
        quiet_since = 0.0
        self.write(": following\n\n")
        while not self._closed:
            chunk = handle.read()
            if chunk:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self.write(f"data: {line.decode('utf-8', 'replace')}\n\n")
                quiet_since = 0.0
            elif os.stat(path).st_size < handle.tell():  # truncated or rotated: start over
                handle.seek(0)
                continue
            else:
                quiet_since += POLL_S
                if quiet_since >= KEEPALIVE_S:
                    self.write(": keep-alive\n\n")
                    quiet_since = 0.0
            try:
                await self.flush()
            except iostream.StreamClosedError:
                return
            await asyncio.sleep(POLL_S)


class LogPageHandler(_LogsMixin, JupyterHandler):
    """``GET scalelab/logs``: a page that lists the logs and follows the one clicked."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        api = html.escape(self.base_url + "scalelab/api/logs", quote=True)
        items = "".join(
            f'<li><a href="#" data-name="{html.escape(log["name"], quote=True)}">'
            f"{html.escape(log['name'])}</a> ({log['size']} bytes)</li>"
            for log in self.listed()
        )
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(PAGE.replace("{api}", api).replace("{items}", items or "<li>no logs yet</li>"))


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>ScaleLab live logs</title>
<style>body{font-family:sans-serif;margin:1em}pre{background:#111;color:#ddd;padding:.5em;
height:70vh;overflow:auto;white-space:pre-wrap}</style></head>
<body><h1>Live logs</h1><p>The single-user server's log and each Spark driver's, as they grow.</p>
<ul id="logs">{items}</ul><h2 id="title"></h2><pre id="out"></pre>
<script>
let source = null;
document.querySelectorAll("#logs a").forEach(a => a.addEventListener("click", ev => {
  ev.preventDefault();
  if (source) source.close();
  const out = document.getElementById("out");
  out.textContent = "";
  document.getElementById("title").textContent = a.dataset.name;
  source = new EventSource("{api}/" + encodeURIComponent(a.dataset.name));
  source.onmessage = m => {
    const end = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    out.textContent += m.data + "\\n";
    if (end) out.scrollTop = out.scrollHeight;
  };
}));
</script></body></html>
"""


def handlers(base_url: str) -> list[tuple[str, type, dict]]:
    """Tornado handlers of the live logs, under ``base_url`` (``/user/alice/``)."""
    base = base_url.rstrip("/")
    return [
        (rf"{base}/scalelab/logs/?", LogPageHandler, {}),
        (rf"{base}/scalelab/api/logs/?", LogListHandler, {}),
        (rf"{base}/scalelab/api/logs/([^/]+)", LogStreamHandler, {}),
    ]


def setup(serverapp: Any) -> Path:
    """Wire the live logs into a jupyter_server ``ServerApp`` (called by the server extension).

    Sets ``SCALELAB_LOG_DIR`` for the kernels (which inherit the server's environment), tees
    the server's log into ``server.log`` there, and adds the handlers.

    Returns
    -------
    Path
        The log folder.
    """
    folder = log_dir(os.environ)
    os.environ[envvars.LOG_DIR] = str(folder)
    add_server_log_file(serverapp.log, folder)
    serverapp.web_app.settings["scalelab_log_dir"] = folder
    serverapp.web_app.add_handlers(".*$", handlers(serverapp.base_url))
    return folder
