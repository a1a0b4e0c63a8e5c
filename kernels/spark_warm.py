"""The warm Spark driver, taken by the next PySpark kernel: the kernel's side and the protocol.

:func:`take_or_none` sends the keeper (``$SCALELAB_SPARK_WARM_SOCKET``) the kernel's
:func:`identity` and, on a match, takes its driver JVM (stdin and stderr by ``SCM_RIGHTS``) into
the kernel's ``SparkContext`` and ``SparkSession``; otherwise None, and the kernel starts its own.
Why: docs/design-notes.md, scalelab.kernels.spark_warm.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from scalelab import envvars

#: Seconds a kernel waits for the keeper to answer (it answers at once: a local socket).
CONNECT_TIMEOUT_S = 5.0
#: Environment variables of each kernel process of its own: jupyter_client's
#: (``JPY_PARENT_PID``, ``JPY_SESSION_NAME``, ``JPY_INTERRUPT_EVENT``) and the debugger's. Every
#: other variable must be equal for a kernel to take a warm driver (the keeper sets those a
#: kernel sets for itself first: :func:`as_in_a_kernel`).
KERNEL_OWN_PREFIXES = ("JPY_", "PYDEVD_")
#: What the keeper sets in its own environment for the JVM before a kernel exists
#: (:func:`scalelab.kernels.spark_session.prepare_driver_environment`), which a kernel sets
#: the same way only once it starts a driver: left out of the comparison, and set in the kernel
#: when it takes the driver.
DRIVER_SET = frozenset({"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"})


def compared_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables each kernel has of its own
    (:data:`KERNEL_OWN_PREFIXES`) and those the driver's start sets (:data:`DRIVER_SET`)
    (pure)."""
    return {
        k: v
        for k, v in environ.items()
        if k not in DRIVER_SET and not k.startswith(KERNEL_OWN_PREFIXES)
    }


def as_in_a_kernel() -> None:
    """Set in ``os.environ`` what a ScaleLab kernel process sets in its own before its start-up
    code runs, so that a driver started here inherits what a kernel-started one does: IPython's
    (ipykernel's ``ZMQInteractiveShell.init_environment``: ``TERM``, ``CLICOLOR``,
    ``FORCE_COLOR``, ``CLICOLOR_FORCE``, ``PAGER``, ``GIT_PAGER``), ipykernel's ``MPLBACKEND``
    (unless set) and ScaleLab's ``OMP_WAIT_POLICY=PASSIVE`` (unless set:
    :func:`scalelab.kernels.import_order.passive_openmp_waits`)."""
    from ipykernel.zmqshell import ZMQInteractiveShell

    from scalelab.kernels.import_order import passive_openmp_waits

    ZMQInteractiveShell.init_environment(None)  # it sets os.environ only
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    passive_openmp_waits()


def identity(cwd: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """What a driver started for a kernel depends on, which must match for it to be taken.

    Returns
    -------
    dict
        ``cwd`` (the real path of the working folder: the JVM's, its Python workers', Spark
        SQL's warehouse folder), ``python`` (``sys.executable``: the workers' interpreter),
        ``versions`` (ScaleLab's and PySpark's) and ``env`` (each compared variable's name ->
        the SHA-256 of its value: :func:`compared_environment`).
    """
    versions = []
    for package in ("scalelab", "pyspark"):
        try:
            versions.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            versions.append("")
    return {
        "cwd": os.path.realpath(cwd),
        "python": sys.executable,
        "versions": versions,
        "env": {
            k: hashlib.sha256(v.encode("utf-8", "surrogateescape")).hexdigest()
            for k, v in compared_environment(environ).items()
        },
    }


def difference(offered: Mapping[str, Any], wanted: Mapping[str, Any]) -> str | None:
    """Why a driver of identity ``offered`` does not fit a kernel of identity ``wanted`` (both
    :func:`identity`), in one line naming what differs (variable names, never values); None
    when it fits (pure)."""
    for key, what in (("cwd", "working folder"), ("python", "interpreter")):
        if offered.get(key) != wanted.get(key):
            return f"another {what} ({wanted.get(key)}, the driver's is {offered.get(key)})"
    if offered.get("versions") != wanted.get("versions"):
        return "other ScaleLab or PySpark versions"
    mine, theirs = offered.get("env", {}), wanted.get("env", {})
    names = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if names:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return f"another environment ({shown})"
    return None


def send_line(sock: socket.socket, message: Mapping[str, Any], fds: list[int] = ()) -> None:
    """Send ``message`` as one JSON line on ``sock``, with ``fds`` (``SCM_RIGHTS``)."""
    data = json.dumps(dict(message)).encode() + b"\n"
    if fds:
        sent = socket.send_fds(sock, [data], list(fds))
        data = data[sent:]
    if data:
        sock.sendall(data)


def read_line(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One JSON line from ``sock`` and the descriptors that came with it; ``(None, fds)`` at
    end of file or on a line that is not a JSON object.

    Raises
    ------
    OSError
        The socket failed or timed out (``TimeoutError``).
    """
    data, fds = b"", []
    while not data.endswith(b"\n"):
        if max_fds and not fds:
            chunk, got, _flags, _addr = socket.recv_fds(sock, 65536, max_fds)
            fds.extend(got)
        else:
            chunk = sock.recv(65536)
        if not chunk:
            return None, fds
        data += chunk
    try:
        message = json.loads(data)
    except ValueError:
        return None, fds
    return (message if isinstance(message, dict) else None), fds


class KeeperReport:
    """The warm driver's JVM as a kernel sees it, standing in for the ``Popen`` PySpark keeps
    (``gateway.proc``): :meth:`poll` gives the JVM's exit status once the keeper reported it
    (its parent), None while it runs; ``pid`` is the JVM's."""

    def __init__(self, sock: socket.socket, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._sock = sock
        self._thread = threading.Thread(target=self._read, name="scalelab-warm-driver", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        self._sock.settimeout(None)
        try:
            message, _ = read_line(self._sock)
        except OSError:
            message = None
        if message is not None and isinstance(message.get("exit"), int):
            self.returncode = message["exit"]
        self._sock.close()

    def poll(self) -> int | None:
        """The JVM's exit status, or None while it runs (or while the keeper has not told)."""
        return self.returncode


@dataclass
class Handover:
    """A warm driver handed to this kernel: py4j's ``port`` and ``secret``, the JVM's ``pid``,
    its ``app_id``, the Spark settings it was started with (``conf``), and the JVM's stdin
    (``stdin_fd``: closing it ends the JVM) and stderr (``stderr_fd``) descriptors."""

    port: int
    secret: str
    pid: int
    app_id: str
    conf: dict[str, str]
    stdin_fd: int
    stderr_fd: int
    report: KeeperReport


def take(path: str, wanted: Mapping[str, Any]) -> tuple[Handover | None, str]:
    """Ask the keeper at ``path`` for its driver, for a kernel of identity ``wanted``.

    Returns
    -------
    (Handover or None, str)
        The driver, or None and why not (no keeper listening, declined: the keeper's reason,
        an unreadable answer).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(path)
    except OSError as exc:  # none ready now (between two keepers, or none at all)
        sock.close()
        return None, f"no warm driver ready ({exc.strerror or exc})"
    try:
        send_line(sock, {"take": dict(wanted), "pid": os.getpid()})
        answer, fds = read_line(sock, max_fds=2)
    except OSError as exc:
        sock.close()
        return None, f"the warm driver's keeper did not answer ({exc})"
    if answer is None or not answer.get("taken") or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        sock.close()
        why = (answer or {}).get("why") or "the keeper's answer was unreadable"
        return None, f"the warm driver was not for this kernel: {why}"
    for fd in fds:
        os.set_inheritable(fd, False)
    handover = Handover(
        port=int(answer["port"]),
        secret=str(answer["secret"]),
        pid=int(answer["pid"]),
        app_id=str(answer["app_id"]),
        conf={str(k): str(v) for k, v in answer["conf"].items()},
        stdin_fd=fds[0],
        stderr_fd=fds[1],
        report=KeeperReport(sock, int(answer["pid"])),
    )
    return handover, ""


def attach(handover: Handover) -> Any:
    """Make the handed-over driver this kernel's: py4j's gateway, PySpark's ``SparkContext``
    around the JVM's context, and ``SparkSession`` around its default session (as built by
    the keeper with the same options the kernel's builder would pass).

    Returns
    -------
    pyspark.sql.SparkSession

    Raises
    ------
    Exception
        Whatever py4j or PySpark raised (the JVM went away meanwhile, say); the caller then
        closes the descriptors (ending the JVM) and starts a driver of its own.
    """
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from scalelab.common.stderr_lines import forward
    from scalelab.kernels.spark_session import JVM_START_LINES, prepare_driver_environment

    prepare_driver_environment(handover.conf)
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            raise RuntimeError("this kernel already has a Spark driver")
        os.environ["PYSPARK_GATEWAY_PORT"] = str(handover.port)
        os.environ["PYSPARK_GATEWAY_SECRET"] = handover.secret
        try:
            gateway = launch_gateway()
        finally:  # never inherited: a `!pyspark` in a cell would attach to this JVM
            os.environ.pop("PYSPARK_GATEWAY_PORT", None)
            os.environ.pop("PYSPARK_GATEWAY_SECRET", None)
        gateway.proc = handover.report
        gateway.scalelab_warm_stdin = handover.stdin_fd  # held: the JVM lives while we do
        SparkContext._ensure_initialized(gateway=gateway)
    forward(handover.stderr_fd, 2, JVM_START_LINES, fold_java_frames=True)
    handover.stderr_fd = -1
    jvm = gateway.jvm
    jsc = jvm.org.apache.spark.api.java.JavaSparkContext(
        jvm.org.apache.spark.SparkContext.getOrCreate()
    )
    context = SparkContext(gateway=gateway, jsc=jsc)
    session = SparkSession(context)  # the JVM's default session: the keeper built it
    if "log4j2.configurationFile" not in handover.conf.get("spark.driver.extraJavaOptions", ""):
        context.setLogLevel("WARN")  # as build_session does
    return session


def take_or_none() -> Any:
    """This kernel's session from the server's warm driver, or None (then the kernel starts
    its own: :func:`scalelab.kernels.spark_session.build_session`).

    None when there is no warm driver socket (``$SCALELAB_SPARK_WARM_SOCKET`` unset), when
    PySpark already has a driver in this kernel (a session the student stopped: its JVM is
    reused), when none is ready or it is not for this kernel (one line on stderr says why), or
    when attaching failed (the JVM is then ended, and a line says why).
    """
    path = os.environ.get(envvars.SPARK_WARM_SOCKET)
    if not path:
        return None
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    if SparkContext._gateway is not None:
        return None
    handover, why = take(path, identity(os.getcwd(), os.environ))
    if handover is None:
        _log(f"ScaleLab: starting a Spark driver for this kernel: {why}")
        return None
    try:
        return attach(handover)
    except Exception as exc:  # noqa: BLE001 -- the normal start follows, and says its own errors
        for fd in (handover.stdin_fd, handover.stderr_fd):
            if fd >= 0:
                os.close(fd)  # the JVM ends
        with SparkContext._lock:
            SparkContext._gateway = SparkContext._jvm = None
        _log(
            f"ScaleLab: the warm Spark driver could not be taken ({type(exc).__name__}: {exc}); "
            "starting one for this kernel"
        )
        return None


def _log(line: str) -> None:
    """One line to the kernel process's own stderr (the server's log), not to a cell: IPython
    sends ``sys.stderr`` to the notebook."""
    stream = sys.__stderr__
    if stream is not None:
        print(line, file=stream, flush=True)
