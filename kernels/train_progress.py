"""Live progress of distributed training: per-epoch figures of every rank, in the notebook.

:class:`TrainingProgress` opens a small TCP server in the kernel and a table in the cell that is
updated in place; each rank calls ``report(epoch=..., loss=..., ...)`` on its
:meth:`~TrainingProgress.reporter`, and a report that cannot be sent never fails the training.
Why: docs/design-notes.md, scalelab.kernels.train_progress.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import select
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: Longest report line accepted (bytes).
MAX_LINE = 64 * 1024
#: Longest wait (seconds) on leaving the ``with`` block for reports still in flight: connections
#: not yet accepted or still being read (a rank that has ended has closed its connection).
DRAIN_S = 10.0


def _rank() -> int:
    """This process's rank: torch.distributed's when its process group is up, else ``RANK``."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0"))


class Reporter:
    """What a rank uses to send its figures to the notebook (picklable; see the module's doc).

    Attributes: ``host`` and ``port`` of the driver's server, ``token`` (reports without it are
    ignored).
    """

    def __init__(self, host: str, port: int, token: str):
        self.host, self.port, self.token = host, port, token
        self._sock: socket.socket | None = None
        self._failed = False

    def __getstate__(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "token": self.token}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["host"], state["port"], state["token"])

    def report(self, *, epoch: int, **figures: float) -> None:
        """Send this rank's figures for ``epoch`` (e.g. ``loss``, ``samples_per_s``,
        ``accuracy``: numbers or short strings). Never raises for a network failure."""
        if self._failed:
            return
        line = {"token": self.token, "rank": _rank(), "epoch": int(epoch), "figures": figures}
        data = (json.dumps(line, default=float) + "\n").encode()
        try:
            if self._sock is None:
                self._sock = socket.create_connection((self.host, self.port), timeout=10)
            self._sock.sendall(data)
        except OSError as exc:
            self._failed = True
            print(
                f"ScaleLab: progress reports to {self.host}:{self.port} stopped: {exc}",
                file=sys.stderr,
            )

    def close(self) -> None:
        """Close this process's connection (a rank's closes when its process ends)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """A display bundle (``text/plain`` and ``text/html``) of ``rows`` (dicts of one epoch of
    one rank: ``epoch``, ``rank``, figures), in their order; columns in first-seen order (pure)."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    cells = [[_number(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    plain = "\n".join(
        "  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True))
        for line in [columns, *cells]
    )
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in line) + "</tr>" for line in cells
    )
    return {
        "text/plain": plain or "(no progress reported yet)",
        "text/html": f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
    }


class TrainingProgress:
    """A driver-side server for :class:`Reporter` lines, shown as a live table in the cell.

    Parameters
    ----------
    host
        The address the executors reach the driver on; None: the active session's
        ``spark.driver.host``, else 127.0.0.1. The server listens on every interface.

    Use it as a context manager (``with TrainingProgress() as progress:``): entering shows the
    table and starts the server; leaving without an exception first waits (at most
    :data:`DRAIN_S` seconds) until every connection is read to its end, so that the ranks' last
    lines are in the table, then stops the server (the table stays). ``rows`` holds every row
    received, in order.
    """

    def __init__(self, host: str | None = None):
        self.host = host or _driver_host()
        self.token = secrets.token_hex(16)
        self.rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._server: socketserver.ThreadingTCPServer | None = None
        self._handle: Any = None
        self._reading = 0  # connections accepted and not yet read to their end
        self._counting = threading.Lock()  # guards _reading and the accepting of connections
        self._given: list[Reporter] = []  # this process's reporters (ranks get copies)

    def reporter(self) -> Reporter:
        """What to pass to the training function (the server must be running)."""
        if self._server is None:
            raise RuntimeError("start the progress server first: `with TrainingProgress() as p:`")
        reporter = Reporter(self.host, self._server.server_address[1], self.token)
        self._given.append(reporter)
        return reporter

    def add(self, line: Mapping[str, Any]) -> None:
        """Take one report (a decoded line) and update the table; wrong tokens are ignored."""
        if line.get("token") != self.token:
            return
        row = {"epoch": line.get("epoch"), "rank": line.get("rank")}
        row.update(line.get("figures") or {})
        row["at_s"] = round(time.monotonic() - self._started, 1)
        # The update is sent under the lock too: ranks report the same epoch at the same moment
        # (each connection has its own thread), and a table built first but sent last would
        # replace the newer one (seen: rank 1's row missing from a finished 2-rank job's table).
        with self._lock:
            self.rows.append(row)
            self.rows.sort(key=lambda r: (r["epoch"], r["rank"]))
            if self._handle is not None:
                self._handle.update(table(self.rows), raw=True)

    def __enter__(self) -> TrainingProgress:
        progress = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for raw in self.rfile:
                    if len(raw) > MAX_LINE:
                        return
                    try:
                        progress.add(json.loads(raw))
                    except (ValueError, AttributeError):
                        continue

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self) -> Any:
                with progress._counting:  # accepted and counted at once, as _drain sees them
                    accepted = super().get_request()
                    progress._reading += 1
                    return accepted

            def shutdown_request(self, request: Any) -> None:
                super().shutdown_request(request)
                with progress._counting:
                    progress._reading -= 1

        self._server = Server(("0.0.0.0", 0), Handler)
        threading.Thread(
            target=self._server.serve_forever, name="scalelab-progress", daemon=True
        ).start()
        try:
            from IPython.display import display

            self._handle = display(table(self.rows), raw=True, display_id=True)
        except ImportError:
            self._handle = None
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_exc: object) -> None:
        if self._server is not None:
            for reporter in self._given:  # one used in the kernel itself ends its connection
                reporter.close()
            if exc_type is None:  # the job ended: its ranks' last lines are still worth waiting for
                self._drain(DRAIN_S)
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until no connection waits to be accepted and every
        accepted one is read to its end, so that the table holds every line sent before the ranks
        ended (under load a rank's last line can still be in the listen queue when the job
        returns)."""
        assert self._server is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._counting:
                reading = self._reading
                pending, _, _ = select.select([self._server.socket], [], [], 0)
            if not reading and not pending:
                return
            time.sleep(0.02)


def _driver_host() -> str:
    """``spark.driver.host`` of the active or default session (in a ScaleLab kernel the lookup
    waits for its background-built ``spark``), else 127.0.0.1."""
    try:
        from pyspark.sql import SparkSession

        session = SparkSession.active()  # the thread's active session, else the default one
        return session.sparkContext.getConf().get("spark.driver.host") or "127.0.0.1"
    except Exception:  # noqa: BLE001 -- no Spark or no session here: the loopback
        pass
    return "127.0.0.1"
