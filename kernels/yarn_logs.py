"""The YARN containers' logs of the kernel's Spark application, live in the server's log view.

:class:`ContainerLogMirror` asks the ResourceManager's and NodeManagers' REST APIs every
:data:`POLL_S` seconds for the containers' ``stderr`` and appends what is new to
``<log dir>/yarn-<container>-stderr.log``, which :mod:`scalelab.hub_ext.server.logstream` follows.
Why: docs/design-notes.md, scalelab.kernels.yarn_logs.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Seconds between two looks at the application's containers and their logs.
POLL_S = 2.0
#: The container log copied (the executors' log4j and Python output).
LOG_FILE = "stderr"
_CONTAINER = re.compile(r"^container_[0-9e_]+$")


def log_name(container_id: str, file: str = LOG_FILE) -> str:
    """``yarn-<container>-<file>.log``: the copy's name in the log folder (pure).

    Raises
    ------
    ValueError
        ``container_id`` is not a YARN container id.
    """
    if not _CONTAINER.match(container_id):
        raise ValueError(f"not a YARN container id: {container_id!r}")
    return f"yarn-{container_id}-{file}.log"


def containers(rm_web: str, application: str, get: Callable[[str], Any]) -> list[dict[str, str]]:
    """The application's containers now: ``[{"id", "node"}]``, ``node`` the NodeManager's
    HTTP address (``host:port``), from the ResourceManager at ``rm_web`` (``host:port``).
    ``get(url)`` returns a URL's JSON."""
    base = f"http://{rm_web}/ws/v1/cluster/apps/{application}/appattempts"
    attempts = (get(base).get("appAttempts") or {}).get("appAttempt") or []
    found = []
    for attempt in attempts[-1:]:
        url = f"{base}/{attempt['appAttemptId']}/containers"
        for container in (get(url) or {}).get("container") or []:
            found.append({"id": container["containerId"], "node": container["nodeHttpAddress"]})
    return found


def container_log_url(node: str, container_id: str, file: str = LOG_FILE) -> str:
    """The NodeManager's REST URL of a running container's log file (plain text)."""
    node = node.removeprefix("http://")
    return f"http://{node}/ws/v1/node/containerlogs/{container_id}/{file}"


_LENGTH = re.compile(rb"^LogLength:(\d+)$", re.M)
_CONTENTS = b"LogContents:\n"


def log_contents(answer: bytes) -> bytes:
    """The log file's bytes in a NodeManager's ``containerlogs`` answer (pure), which wraps them
    in a header (``Container: ...``, ``LogType:``, ``LogLength:<bytes>``, ``LogContents:``) and a
    trailer (``End of LogType:stderr...``); an answer without the header is taken whole."""
    start = answer.find(_CONTENTS)
    length = _LENGTH.search(answer, 0, start if start >= 0 else 0)
    if start < 0 or length is None:
        return answer
    begin = start + len(_CONTENTS)
    return answer[begin : begin + int(length.group(1))]


class ContainerLogMirror:
    """Copies the containers' logs of ``application`` into ``folder`` while it runs.

    Parameters
    ----------
    rm_web
        The ResourceManager's web address (``yarn.resourcemanager.webapp.address``).
    application
        The Spark application's id (``sc.applicationId``).
    folder
        The server's log folder.
    running
        Whether to go on (the session is alive); checked before each look.
    """

    def __init__(self, rm_web: str, application: str, folder: Path, running: Callable[[], bool]):
        self.rm_web = rm_web
        self.application = application
        self.folder = folder
        self.running = running
        self.copied: dict[str, int] = {}  # container id -> bytes copied
        self.seen: dict[str, str] = {}  # container id -> its NodeManager, while it ran
        self.ended: set[str] = set()  # containers gone from the list, read to their end
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scalelab-yarn-logs", daemon=True)

    def start(self) -> ContainerLogMirror:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        import requests

        session = requests.Session()

        def get_json(url: str) -> Any:
            answer = session.get(url, timeout=10, headers={"Accept": "application/json"})
            answer.raise_for_status()
            return answer.json()

        def get_text(url: str) -> bytes:
            answer = session.get(url, timeout=10)
            answer.raise_for_status()
            return answer.content

        while not self._stop.wait(POLL_S) and self.running():
            try:
                self.look(get_json, get_text)
            except Exception:  # noqa: BLE001 -- a ResourceManager or NodeManager away: next time
                continue

    def look(self, get_json: Callable[[str], Any], get_text: Callable[[str], bytes]) -> None:
        """One look: append each container's new log bytes to its copy. A container gone from
        the ResourceManager's list since the last look (finished, or killed: its last lines
        written after that look) is read once more from its NodeManager, which keeps a running
        application's logs, so its copy ends where its log ended."""
        now = {c["id"]: c["node"] for c in containers(self.rm_web, self.application, get_json)}
        gone = {cid: node for cid, node in self.seen.items() if cid not in now}
        self.seen.update(now)
        for cid, node in [*now.items(), *gone.items()]:
            if cid in self.ended:
                continue
            try:
                text = log_contents(get_text(container_log_url(node, cid)))
            except Exception:  # noqa: BLE001 -- not started yet, or its NodeManager is gone
                continue
            if cid in gone:
                self.ended.add(cid)
            done = self.copied.get(cid, 0)
            if len(text) <= done:
                continue
            self.folder.mkdir(parents=True, exist_ok=True)
            with (self.folder / log_name(cid)).open("ab") as copy:
                copy.write(text[done:])
            self.copied[cid] = len(text)
