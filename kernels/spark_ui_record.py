"""Where a kernel's Spark UI is, told to the student's server by a small file per kernel.

After each cell in which its ``SparkContext`` changed, the kernel writes
``scalelab-sparkui-<kernel id>.json`` beside its connection file (removed after ``spark.stop()``);
:class:`SparkUIRecord` and :func:`read_records` are the format, shared with the server.
Why: docs/design-notes.md, scalelab.kernels.spark_ui_record.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scalelab.common.atomicfile import write_atomic

#: File name of a kernel's record: ``scalelab-sparkui-<kernel id>.json``.
RECORD_PREFIX = "scalelab-sparkui-"
#: A kernel id as jupyter_client makes them (a UUID), or any name safe as a file name part.
_KERNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class SparkUIRecord:
    """A kernel's Spark UI.

    Attributes
    ----------
    kernel_id
        The Jupyter kernel's id.
    port
        The UI's TCP port on the server's machine (1-65535).
    app_id
        The Spark application's id (``local-1700000000000``).
    app_name
        The Spark application's name (``spark.app.name``).
    pid
        The kernel process's id.
    started
        When the SparkContext started, in seconds since the epoch.
    """

    kernel_id: str
    port: int
    app_id: str
    app_name: str
    pid: int
    started: float

    def to_json(self) -> str:
        """The record as one JSON object (its attributes' names as keys)."""
        return json.dumps(asdict(self))


def record_name(kernel_id: str) -> str:
    """``"scalelab-sparkui-<kernel_id>.json"``.

    Raises
    ------
    ValueError
        ``kernel_id`` is not a kernel id (a path, an empty string).
    """
    if not _KERNEL_ID.fullmatch(kernel_id):
        raise ValueError(f"not a kernel id: {kernel_id!r}")
    return f"{RECORD_PREFIX}{kernel_id}.json"


def kernel_id_of(connection_file: str | Path) -> str | None:
    """The kernel id in a connection file's name (``.../kernel-<id>.json`` -> ``<id>``), or
    None for a name jupyter_client did not make."""
    name = Path(connection_file).name
    if not (name.startswith("kernel-") and name.endswith(".json")):
        return None
    kernel_id = name[len("kernel-") : -len(".json")]
    return kernel_id if _KERNEL_ID.fullmatch(kernel_id) else None


def parse_record(text: str, kernel_id: str) -> SparkUIRecord | None:
    """The record in ``text`` (a file's content) of kernel ``kernel_id`` (from its file name),
    or None when it is not one: not JSON, a field missing or of the wrong type, a port out of
    1-65535, a pid below 1, or another kernel's id. Pure."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kernel_id") != kernel_id:
        return None
    port, pid, started = data.get("port"), data.get("pid"), data.get("started")
    app_id, app_name = data.get("app_id"), data.get("app_name")
    integers = all(isinstance(v, int) and not isinstance(v, bool) for v in (port, pid))
    if not integers or not 0 < port < 65536 or pid < 1:
        return None
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        return None
    if not isinstance(app_id, str) or not isinstance(app_name, str):
        return None
    return SparkUIRecord(kernel_id, port, app_id, app_name, pid, float(started))


def read_records(folder: str | Path) -> list[SparkUIRecord]:
    """Every well-formed record in ``folder`` (see :func:`parse_record`); a file that cannot
    be read or parsed is skipped, a missing folder is no record."""
    found = []
    try:
        paths = sorted(Path(folder).glob(f"{RECORD_PREFIX}*.json"))
    except OSError:
        return []
    for path in paths:
        kernel_id = path.name[len(RECORD_PREFIX) : -len(".json")]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        record = parse_record(text, kernel_id)
        if record is not None:
            found.append(record)
    return found


def write_record(folder: str | Path, record: SparkUIRecord) -> Path:
    """Write ``record`` into ``folder`` (atomically, mode 0600); returns its path.

    Raises
    ------
    OSError
        It could not be written.
    """
    path = Path(folder) / record_name(record.kernel_id)
    write_atomic(path, record.to_json())
    return path


def remove_record(folder: str | Path, kernel_id: str) -> None:
    """Remove kernel ``kernel_id``'s record from ``folder``, if there is one.

    Raises
    ------
    OSError
        It exists and could not be removed.
    """
    (Path(folder) / record_name(kernel_id)).unlink(missing_ok=True)


def context_record(context: Any, kernel_id: str, pid: int) -> SparkUIRecord | None:
    """The record of a running ``pyspark.SparkContext``'s UI (asks the driver JVM), or None
    when it has no UI or its UI is not served behind the hub (``spark.ui.proxyBase`` is not
    ``.../sparkui/<its port>``).

    Raises
    ------
    Exception
        Whatever Py4J raises when the driver JVM is gone.
    """
    web_url = context.uiWebUrl
    port = urlsplit(web_url).port if web_url else None
    if not port:
        return None
    proxy_base = context.getConf().get("spark.ui.proxyBase", "") or ""
    if not proxy_base.rstrip("/").endswith(f"/sparkui/{port}"):
        return None
    return SparkUIRecord(
        kernel_id=kernel_id,
        port=port,
        app_id=str(context.applicationId),
        app_name=str(context.appName),
        pid=pid,
        started=context.startTime / 1000,
    )


class _Recorder:
    """Keeps the record of one kernel in line with its active SparkContext, after each cell."""

    def __init__(self, folder: Path, kernel_id: str):
        self.folder = folder
        self.kernel_id = kernel_id
        self.seen: Any = None  # the SparkContext last recorded (or found without a proxied UI)
        self.written = False

    def after_cell(self, *_args: Any) -> None:
        core = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
        context = getattr(getattr(core, "SparkContext", None), "_active_spark_context", None)
        if context is not None and context is self.seen:
            return
        if context is None or getattr(context, "_jsc", None) is None:  # stopped, or starting
            self.seen = None
            self._remove()
            return
        try:
            record = context_record(context, self.kernel_id, os.getpid())
        except Exception:  # noqa: BLE001 -- the driver is gone or not ready: the next cell
            return
        self.seen = context
        if record is None:
            self._remove()
            return
        try:
            write_record(self.folder, record)
            self.written = True
        except OSError:  # a full disk: the page says no Spark runs; the cell's link still works
            pass

    def _remove(self) -> None:
        if self.written:
            try:
                remove_record(self.folder, self.kernel_id)
            except OSError:
                return
            self.written = False


def install(shell: Any) -> None:
    """Keep this kernel's record (see the module's doc) after each cell of ``shell`` (the
    kernel's ``InteractiveShell``). Does nothing outside a Jupyter kernel (no connection file)
    or when the connection file's name carries no kernel id."""
    try:
        from ipykernel.connect import get_connection_file

        connection_file = get_connection_file()
    except (ImportError, RuntimeError, OSError):
        return
    kernel_id = kernel_id_of(connection_file)
    if kernel_id is None:
        return
    recorder = _Recorder(Path(connection_file).parent, kernel_id)
    shell.events.register("post_run_cell", recorder.after_cell)


def live_records(
    records: Iterable[SparkUIRecord],
    running_kernels: Collection[str],
    process_runs: Callable[[int], bool],
) -> list[SparkUIRecord]:
    """The records of kernels that still run (pure but for ``process_runs``), newest first.

    Parameters
    ----------
    records
        As :func:`read_records` found them.
    running_kernels
        The ids of the server's running kernels (a record of a kernel shut down is stale).
    process_runs
        Whether a pid runs (:func:`scalelab.common.processes.pid_runs`): a kernel restarted
        under the same id has a new pid, and its old record is stale.
    """
    live = [r for r in records if r.kernel_id in running_kernels and process_runs(r.pid)]
    return sorted(live, key=lambda r: r.started, reverse=True)
