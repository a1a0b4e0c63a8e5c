"""What the ranks of pyspark's ``TorchDistributor`` printed, kept in the kernel to explain a crash.

:func:`install` makes TorchDistributor's log server keep the last :data:`LINES_KEPT` lines per
barrier task; :func:`rank_of`, :func:`exception_lines` and :func:`root_cause` parse torchrun's
output (pure); :func:`task_places` asks the driver's UI where each task of the failed stage ran.
Why: docs/design-notes.md, scalelab.kernels.torch_ranks.
"""

from __future__ import annotations

import collections
import importlib.abc
import itertools
import json
import logging
import re
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from typing import Any

#: Lines kept per connection (per barrier task).
LINES_KEPT = 200
#: Connections kept (the last runs').
CONNECTIONS_KEPT = 32

_lock = threading.Lock()
_counter = itertools.count()
#: (server port, connection number) -> its last lines, oldest connection first.
_connections: collections.OrderedDict[tuple[int, int], collections.deque[str]] = (
    collections.OrderedDict()
)


def record(key: tuple[int, int], line: str) -> None:
    """Keep ``line`` (one line of a rank's output) under connection ``key``."""
    with _lock:
        if key not in _connections:
            _connections[key] = collections.deque(maxlen=LINES_KEPT)
            while len(_connections) > CONNECTIONS_KEPT:
                _connections.popitem(last=False)
        _connections[key].append(line)


def last_run() -> list[list[str]]:
    """The lines of each connection to the most recent run's server (one list a barrier
    task), in the order they connected; empty before any run."""
    with _lock:
        if not _connections:
            return []
        port = next(reversed(_connections))[0]
        return [list(lines) for (p, _n), lines in _connections.items() if p == port]


#: The module of pyspark's log server for TorchDistributor's ranks.
LOG_MODULE = "pyspark.ml.torch.log_communication"


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs :func:`patch` on :data:`LOG_MODULE` once it is imported (pyspark.ml takes about
    0.6 s to import: not at every kernel's start, only for those that use it)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != LOG_MODULE:
            return None
        for finder in sys.meta_path:  # the finder that would have found it
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


#: The logger pyspark's ``TorchDistributor`` writes its INFO lines to ("Started distributed
#: training with 2 executor processes", "Finished local training with 4 processes"), on stderr.
DISTRIBUTOR_LOGGER = "TorchDistributor"


class InfoAsOutput(logging.Filter):
    """Shows a logger's INFO (and lower) records as normal output, one line on stdout, instead
    of a red stderr box under the cell; warnings and errors pass on to stderr unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        print(record.getMessage(), flush=True)
        return False


def install() -> None:
    """Make pyspark's ``TorchDistributor`` log server keep what it prints (see the module's
    doc), now if its module is imported, else when it is; and show TorchDistributor's own INFO
    lines as normal output (:class:`InfoAsOutput`: pyspark sets that logger's level to INFO at
    each ``TorchDistributor``, so a filter, not a level)."""
    logger = logging.getLogger(DISTRIBUTOR_LOGGER)
    if not any(isinstance(f, InfoAsOutput) for f in logger.filters):
        logger.addFilter(InfoAsOutput())
    module = sys.modules.get(LOG_MODULE)
    if module is not None:
        patch(module)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def patch(log_communication: types.ModuleType) -> bool:
    """Replace the log server's handler in ``log_communication`` by one that also keeps each
    line (:func:`record`); False when the module has no such handler (nothing changed)."""
    original = getattr(log_communication, "WriteLogToStdout", None)
    if original is None or getattr(original, "_scalelab_records", False):
        return original is not None

    class RecordingWriteLogToStdout(original):  # type: ignore[misc, valid-type]
        """pyspark's handler, each line also kept by :func:`record`."""

        _scalelab_records = True

        def _read_bline(self) -> Iterator[bytes]:
            key = (self.server.server_address[1], next(_counter))
            for bline in super()._read_bline():
                for line in bline.decode("utf-8", "replace").splitlines():
                    record(key, line)
                yield bline

    # LogStreamingServer.start looks the handler class up in its module at each run.
    log_communication.WriteLogToStdout = RecordingWriteLogToStdout
    return True


_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?(.*)$")
_ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\b")


def rank_of(lines: Sequence[str]) -> int | None:
    """The rank whose output ``lines`` are (``[rankN]:`` lines, or torchrun's ``rank : N``
    in its failure report), or None when they do not say."""
    for line in lines:
        found = _RANK_PREFIX.match(line) or _ROOT_CAUSE_RANK.match(line)
        if found:
            return int(found.group(1))
    return None


def exception_lines(lines: Sequence[str], rank: int) -> list[str]:
    """Rank ``rank``'s last traceback in ``lines`` (what torch prints for an exception that
    ends a rank: ``[rank1]: Traceback ...``), without the prefix; empty if none."""
    mine = [m.group(2) for m in map(_RANK_PREFIX.match, lines) if m and int(m.group(1)) == rank]
    starts = [i for i, line in enumerate(mine) if line.startswith("Traceback (most recent")]
    return mine[starts[-1] :] if starts else mine


def printed_before(lines: Sequence[str], rank: int, count: int = 3) -> list[str]:
    """The last ``count`` lines the rank's own code printed before its traceback (lines of
    ``lines`` without torch's ``[rankN]:`` prefix, up to the first ``[rank<rank>]:`` line)."""
    prefix = f"[rank{rank}]:"
    end = next((i for i, line in enumerate(lines) if line.startswith(prefix)), len(lines))
    own = [line for line in lines[:end] if not _RANK_PREFIX.match(line)]
    return own[-count:] if count > 0 else []


#: What a rank says when it failed only because another rank had gone (its process group lost
#: the peer): gloo's and NCCL's words, torch.distributed's error for it.
_PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|caused by a remote worker crashing"
    r"|Broken pipe|DistNetworkError|NCCL communicator was aborted|ncclRemoteError"
)


def lost_a_peer(lines: Sequence[str], rank: int) -> bool:
    """Whether rank ``rank``'s last exception in ``lines`` only says that another rank went
    away (gloo's "Connection closed by peer", NCCL's remote error...): the other rank's failure
    is the cause, this one a consequence (pure)."""
    trace = exception_lines(lines, rank)
    return bool(trace) and bool(_PEER_GONE.search(trace[-1]))


def culprit(outputs: Sequence[Sequence[str]], reported: int | None) -> int | None:
    """The rank whose failure to explain: ``reported`` (the barrier task Spark named as failed)
    unless its exception only says a peer went away and another rank has a traceback of its
    own, then that rank (the lowest such). ``reported`` also when no output says more (pure).

    A crashing rank closes its connections; the others' next collective fails with "Connection
    closed by peer", and whichever task Spark sees fail first is the one it names.
    """
    by_rank = {rank_of(lines): lines for lines in outputs}
    named = by_rank.get(reported)
    if reported is None or named is None or not lost_a_peer(named, reported):
        return reported
    for rank in sorted(r for r in by_rank if r is not None and r != reported):
        trace = exception_lines(by_rank[rank], rank)
        if trace and trace[0].startswith("Traceback") and not lost_a_peer(by_rank[rank], rank):
            return rank
    return reported


def root_cause(lines: Sequence[str]) -> dict[str, str]:
    """torchrun's "Root Cause (first observed failure)" fields in ``lines`` (``host``,
    ``rank``, ``exitcode``...), the last such block's; empty if none."""
    fields: dict[str, str] = {}
    inside = False
    for line in lines:
        if line.startswith("Root Cause"):
            inside, fields = True, {}
        elif inside and line.startswith("====="):
            inside = False
        elif inside:
            name, sep, value = line.partition(":")
            if sep and name.strip().isidentifier():
                fields[name.strip()] = value.strip()
    return fields


def task_places(ui_url: str, app_id: str, stage: int, attempt: int = 0) -> dict[int, dict]:
    """Where each task of ``stage`` ran, from the driver's UI REST API: partition ->
    ``{"executor": id, "host": host, "status": ...}``; empty when the UI does not answer."""
    import urllib.request  # only here: not at every kernel's start

    url = f"{ui_url.rstrip('/')}/api/v1/applications/{app_id}/stages/{stage}/{attempt}/taskList"
    try:
        with urllib.request.urlopen(f"{url}?length=10000", timeout=5) as response:
            tasks: list[dict[str, Any]] = json.load(response)
    except (OSError, ValueError):
        return {}
    return {
        int(t.get("partitionId", t.get("index", -1))): {
            "executor": str(t.get("executorId", "?")),
            "host": str(t.get("host", "?")),
            "status": str(t.get("status", "?")),
        }
        for t in tasks
    }
