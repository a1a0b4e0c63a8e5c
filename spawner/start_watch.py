"""A local server's start told apart from its failure, and an early end explained.

:class:`StartWatchMixin`: the start waits until the server listens or its process ends, then
fails with :class:`StartFailed` (the exit status in words, the log's last lines with secrets
masked, a full disk named). :func:`wait_listening` waits; :func:`log_tail`, :func:`redact` and
:func:`failed_start_message` are pure. Why: docs/design-notes.md, scalelab.spawner.start_watch.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, SpawnException

from scalelab.common.diskspace import full_disk_message

#: Lines of the server's output shown with a failed start, at most.
TAIL_LINES = 12
#: Bytes read back from the end of the server's log for the tail, at most.
TAIL_BYTES = 16 * 1024
#: Characters of one shown line, at most (longer lines are cut and end with "…").
LINE_CHARS = 300
#: Seconds between two looks at the port and the process while a server starts.
WATCH_INTERVAL_S = 0.2

_SECRET = re.compile(
    r"(?i)\b([\w.-]*(?:token|secret|password|passwd|api[_-]?key|credential)[\w.-]*)"
    r"(\s*[=:]\s*|\"\s*:\s*\"|'\s*:\s*')([^\s\"'&,;]+)"
)
_FULL_DISK = re.compile(r"No space left on device|Disk quota exceeded|database or disk is full")
_QUOTED_PATH = re.compile(r"""['"](/[^'"]+)['"]""")


#: What a signal that ends a server usually means, in words.
SIGNAL_MEANINGS = {
    signal.SIGKILL: "often the out-of-memory killer",
    signal.SIGSEGV: "a crash",
    signal.SIGBUS: "a crash",
    signal.SIGABRT: "aborted",
    signal.SIGTERM: "stopped from outside",
    signal.SIGINT: "interrupted",
}
#: What a shell's exit status usually means (POSIX: 126 not executable, 127 not found).
EXIT_MEANINGS = {126: "the command cannot be run", 127: "the command was not found"}


def describe_exit(status: int | None) -> str:
    """A server's ``poll`` status in words, with what it usually means (pure).

    ``None``: ``"still running"``; a negative status (killed by a signal):
    ``"killed by SIGKILL, often the out-of-memory killer"``; ``128 + n`` (a shell reporting a
    child killed by signal n): ``"exit status 137: killed by SIGKILL, often the out-of-memory
    killer"``; 126 and 127: what POSIX shells mean by them; else ``"exit status 3"``.
    """
    if status is None:
        return "still running"
    if status < 0:
        return _killed_by(-status)
    if 128 < status < 128 + 65:
        return f"exit status {status}: {_killed_by(status - 128)}"
    if status in EXIT_MEANINGS:
        return f"exit status {status}: {EXIT_MEANINGS[status]}"
    return f"exit status {status}"


def _killed_by(number: int) -> str:
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"killed by signal {number}"
    meaning = SIGNAL_MEANINGS.get(sig)
    return f"killed by {sig.name}, {meaning}" if meaning else f"killed by {sig.name}"


def spawn_failure(message: str, reason: str, log_message: str) -> SpawnException:
    """A :class:`~jupyterhub.spawner.SpawnException` whose ``message`` the student reads (the
    pending page, the progress events, their next visit) and whose ``log_message``, for the
    operators, only the hub's log has; ``reason`` labels the spawn failure metric."""
    failure = SpawnException(message, reason=reason, log_message=log_message)
    failure.jupyterhub_message = message  # JupyterHub's progress shows it, not str(failure)
    return failure


class StartFailed(SpawnException):
    """A server's start failed: its process ended, or it never listened on its port; the
    message says how and why.

    A :class:`~jupyterhub.spawner.SpawnException` (HTTP 503, reason ``"exited"`` or
    ``"silent"``): JupyterHub logs it without a traceback, the pending page shows ``message``
    (``jupyterhub_message``, HTML: ``jupyterhub_html_message``) and the REST start answers it.
    503, not JupyterHub's 500 ("Spawner failed to start"): the request was sound and the hub
    is well; the server it asked for is not available.

    Attributes
    ----------
    exit_status
        The process's exit status, or None when it was still running (it never listened).
    """

    def __init__(
        self, message: str, message_html: str, reason: str, exit_status: int | None
    ) -> None:
        super().__init__(message, reason=reason, message_html=message_html, status_code=503)
        self.exit_status = exit_status

    @property
    def jupyterhub_message(self) -> str:
        return self.message

    @property
    def jupyterhub_html_message(self) -> str:
        return self.message_html


async def wait_listening(
    host: str,
    port: int,
    exited: Callable[[], int | None],
    timeout_s: float,
    interval_s: float = WATCH_INTERVAL_S,
) -> int | None:
    """Wait until something accepts TCP connections on ``host:port`` or the process ends.

    Parameters
    ----------
    host, port
        Where the server is to listen (``""`` or ``0.0.0.0``: loopback is tried).
    exited
        The process's exit status, or None while it runs (``Popen.poll``).
    timeout_s
        Seconds to wait at most.
    interval_s
        Seconds between two looks.

    Returns
    -------
    int | None
        None once the port accepts a connection; the exit status when the process ended
        first (negative: killed by that signal).

    Raises
    ------
    TimeoutError
        Neither happened within ``timeout_s``.
    """
    target = "127.0.0.1" if host in ("", "0.0.0.0") else host
    deadline = time.monotonic() + timeout_s
    while True:
        status = exited()
        if status is not None:
            return status
        if await asyncio.to_thread(_accepts, target, port):
            return None
        if time.monotonic() >= deadline:
            raise TimeoutError(f"nothing listened on {target}:{port} within {timeout_s:g} s")
        await asyncio.sleep(interval_s)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def redact(line: str, secrets: Iterable[str] = ()) -> str:
    """``line`` with each of ``secrets`` and every ``token=…``-like value shown as ``<hidden>``."""
    for secret in secrets:
        if secret:
            line = line.replace(secret, "<hidden>")
    return _SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}<hidden>", line)


def log_tail(
    path: str | os.PathLike[str],
    offset: int = 0,
    lines: int = TAIL_LINES,
    secrets: Iterable[str] = (),
) -> list[str]:
    """The last non-empty lines written to a log file after byte ``offset``, fit to be shown.

    Parameters
    ----------
    path
        The server's log file.
    offset
        Byte offset where this start's output begins (what came before is an earlier start's).
    lines
        How many lines at most.
    secrets
        Strings to mask wherever they occur (the server's API token); ``token=…``-like values
        are masked too (:func:`redact`).

    Returns
    -------
    list[str]
        At most ``lines`` lines, oldest first, each at most :data:`LINE_CHARS` characters,
        decoded as UTF-8 with bad bytes replaced, secrets masked; empty when the file cannot
        be read or has nothing after ``offset``. At most :data:`TAIL_BYTES` are read.
    """
    secrets = tuple(secrets)
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            start = max(offset, size - TAIL_BYTES)
            log.seek(start)
            data = log.read(TAIL_BYTES)
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    if start > offset:  # began mid-line: drop the partial first line
        text = text.partition("\n")[2]
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    return [_cut(redact(line, secrets)) for line in kept]


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def full_disk_path(tail: Iterable[str], default: str | None) -> str | None:
    """The folder whose disk is full, when the tail says a disk is full, else None.

    The path quoted on the first full-disk line (``OSError: [Errno 28] No space left on
    device: '/home/a/x'``) when there is one, else ``default`` (the home).
    """
    for line in tail:
        if _FULL_DISK.search(line):
            quoted = _QUOTED_PATH.search(line)
            return quoted.group(1) if quoted else default
    return None


def failed_start_message(
    head: str, tail: list[str], log_name: str, disk_note: str = ""
) -> tuple[str, str]:
    """What a student and the hub log are told about a server that failed to start.

    Parameters
    ----------
    head
        The first sentence: how it failed (``"Your server stopped while starting (exit
        status 3)."``).
    tail
        Its last lines (:func:`log_tail`); empty when its output is not in a file of its own.
    log_name
        Where its whole output is, for ops (``"its log, /hub/scalelab/logs/alice"``).
    disk_note
        :func:`~scalelab.common.diskspace.full_disk_message`'s line when a disk was full.

    Returns
    -------
    (str, str)
        The plain text message and the same as HTML (the tail in a ``<pre>``, all escaped).
    """
    parts = [head]
    if disk_note:
        parts.append(disk_note)
    if tail:
        parts.append("Its last lines:\n" + "\n".join(tail))
    parts.append(f"The whole output is in {log_name}. Nothing was held for you: start again.")
    text = "\n".join(parts)
    pieces = [html.escape(head)]
    if disk_note:
        pieces.append(f"<p>{html.escape(disk_note)}</p>")
    if tail:
        pieces.append("<p>Its last lines:</p><pre>" + html.escape("\n".join(tail)) + "</pre>")
    pieces.append(html.escape(parts[-1]))
    return text, "\n".join(pieces)


class StartWatchMixin(LocalProcessSpawner):
    """``start`` returns once the server listens on its port, and fails with
    :class:`StartFailed` as soon as its process ends, or when it has not listened within
    ``http_timeout`` seconds (JupyterHub then stops it): ``class S(StartWatchMixin,
    ServerLogMixin, LocalProcessSpawner)``.

    The tail comes from ``server_log_file`` (set by
    :class:`~scalelab.spawner.server_logs.ServerLogMixin`: the path and this start's offset),
    when the output goes to a file of its own.
    """

    #: (log path, byte offset where this start's output begins), or None: set by the log mixin.
    server_log_file: tuple[Path, int] | None = None

    async def start(self):
        url = await super().start()
        host, port = url if isinstance(url, tuple) else (self.ip, self.port)
        try:
            status = await wait_listening(host, port, self.proc.poll, self.http_timeout)
        except TimeoutError:
            head = (
                f"Your server did not listen on its port within {self.http_timeout:g} s "
                "(c.Spawner.http_timeout), so it is being stopped."
            )
            raise self._start_failure(head, "silent", None) from None
        if status is None:
            return url
        head = f"Your server stopped while starting ({describe_exit(status)})."
        raise self._start_failure(head, "exited", status)

    def start_failure_home(self) -> str | None:
        """The folder named when a failed start's output says a disk is full and names none
        (a subclass gives the server's home); None: no folder."""
        return None

    def _start_failure(self, head: str, reason: str, status: int | None) -> StartFailed:
        tail: list[str] = []
        where = "the hub's log"
        if self.server_log_file is not None:
            path, offset = self.server_log_file
            tail = log_tail(path, offset, secrets=[self.api_token or ""])
            where = f"the server's log ({path}; admins: /hub/scalelab/logs/{self.user.name})"
        disk = full_disk_path(tail, self.start_failure_home())
        note = full_disk_message(disk) if disk is not None else ""
        text, markup = failed_start_message(head, tail, where, note)
        return StartFailed(text, markup, reason, status)
