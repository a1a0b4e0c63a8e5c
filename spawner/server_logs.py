"""Each single-user server's output in a file of its own, which outlives the server.

With ``c.ScaleLabSpawner.server_log_dir`` set (``scalelab up`` sets ``<state>/logs/servers``),
a server's stdout and stderr go to ``<server_log_dir>/<user>/server.log`` (a named server:
``server-<name>.log``), appended at every start after a header line. Its kernels inherit them,
so a kernel's output and its Spark driver's log (Spark logs to stderr) are there too. The hub's
admin pages read these files (:mod:`scalelab.hub_ext.hub.server_logs`).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from pathlib import Path
from typing import IO
from urllib.parse import quote

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Unicode


def server_log_path(log_dir: str | Path, user: str, server: str = "") -> Path:
    """Where a server's log is: ``<log_dir>/<user>/server[-<server>].log`` (names %-quoted).

    Raises
    ------
    ValueError
        ``log_dir`` is empty.
    """
    if not str(log_dir):
        raise ValueError("no server_log_dir is configured")
    name = f"server-{quote(server, safe='')}.log" if server else "server.log"
    return Path(log_dir) / quote(user, safe="") / name


def open_server_log(log_dir: str | Path, user: str, server: str, now: float) -> IO[bytes]:
    """Open a server's log for appending and write the start header; the caller closes it."""
    path = server_log_path(log_dir, user, server)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = open(path, "ab")
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds")
    log.write(f"==== ScaleLab: server {user}/{server} starting at {stamp} ====\n".encode())
    log.flush()
    return log


class ServerLogMixin(LocalProcessSpawner):
    """Send a local server's stdout/stderr to its log file: ``class S(ServerLogMixin,
    LocalProcessSpawner)`` (it is a ``LocalProcessSpawner``, whose ``stop`` and ``poll`` it
    keeps and whose ``popen_kwargs`` it sets)."""

    #: (the log file, the byte offset where the latest start's output begins), or None.
    server_log_file: tuple[Path, int] | None = None

    server_log_dir = Unicode(
        "",
        config=True,
        help="""Folder of the servers' log files, `<dir>/<user>/server.log` (named servers:
        `server-<name>.log`), kept after the server stops and appended at each start; the hub's
        admins read them at /hub/scalelab/logs/<user>. Empty (the default): servers write to the
        hub's own output, as with LocalProcessSpawner. `scalelab up` sets
        `<state dir>/logs/servers`.""",
    )

    async def start(self):
        if not self.server_log_dir:
            return await super().start()
        with open_server_log(self.server_log_dir, self.user.name, self.name, time.time()) as log:
            # Where this start's output begins, for the tail of a failed start
            # (scalelab.spawner.start_watch).
            self.server_log_file = (Path(log.name), log.tell())
            # The child gets its own copy of the descriptor; ours closes after the start.
            self.popen_kwargs = {**self.popen_kwargs, "stdout": log, "stderr": subprocess.STDOUT}
            return await super().start()
