"""The warm Spark driver's keeper process, started by the single-user server for the next kernel.

``python -m scalelab.kernels.warm_driver --socket PATH --parent PID`` starts the driver JVM as
the kernel would, runs a one-row job, hands it to the first kernel of the same identity on
``PATH`` (:mod:`scalelab.kernels.spark_warm`), then reports the JVM's exit; JSON events on stdout.
Why: docs/design-notes.md, scalelab.kernels.warm_driver.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from typing import Any

from scalelab.common.logfiles import log_dir
from scalelab.common.pdeathsig import set_parent_death_signal
from scalelab.common.stderr_lines import QUIET_S, LineFilter, _write_all
from scalelab.kernels import spark_warm

#: The job description of the warm-up job, as the Spark UI shows it.
WARM_UP_DESCRIPTION = "ScaleLab: warm-up of the driver, run before a kernel took it"
#: What the keeper becomes once a kernel took its driver (``exec``: the same process, so still
#: the JVM's parent, in a bare interpreter): waits for the JVM (argv 1: its pid) to end, then
#: tells the kernel (argv 2: the connection's descriptor) and the server its exit status.
WAITER = """
import json, os, socket, sys
pid, fd = int(sys.argv[1]), int(sys.argv[2])
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
try:
    socket.socket(fileno=fd).sendall(json.dumps({"exit": code}).encode() + b"\\n")
except OSError:
    pass
try:
    print(json.dumps({"event": "exit", "status": code}), flush=True)
except OSError:
    pass
"""
#: Seconds a connected kernel has to send its request.
REQUEST_TIMEOUT_S = 5.0


def emit(event: str, **fields: Any) -> None:
    """One event line on stdout for the server; nothing if the server is gone."""
    try:
        print(json.dumps({"event": event, **fields}), flush=True)
    except (OSError, ValueError):
        pass


class StderrPump:
    """Passes the JVM's stderr on to ours, without the harmless lines, until :meth:`stop`
    (which leaves the pipe open, for the kernel that takes the driver)."""

    def __init__(self, source: int, known: Any):
        self.source = source
        self.lines = LineFilter(known, fold_java_frames=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="warm-driver-stderr", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.source, select.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(QUIET_S * 1000):
                _write_all(2, self.lines.flush())
                continue
            data = os.read(self.source, 65536)
            if not data:
                break
            _write_all(2, self.lines.feed(data))
        _write_all(2, self.lines.flush())

    def stop(self) -> None:
        """Stop reading (within :data:`~scalelab.common.stderr_lines.QUIET_S` seconds)."""
        self._stop.set()
        self._thread.join()


def start_driver(conf: dict[str, str]) -> tuple[Any, Any, int, StderrPump]:
    """Start the JVM with ``conf``, its context and default session, and the warm-up job.

    Returns
    -------
    (gateway, Popen, stderr read end, StderrPump)

    Raises
    ------
    Exception
        Whatever pyspark or py4j raised (no Java, a bad setting).
    """
    from pyspark import SparkConf
    from pyspark.core.context import DEFAULT_CONFIGS
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from scalelab.kernels.spark_session import JVM_START_LINES

    read_end, write_end = os.pipe()
    pump = StderrPump(read_end, JVM_START_LINES)
    try:
        gateway = launch_gateway(
            SparkConf().setAll(list(conf.items())),
            popen_kwargs={"stderr": write_end},
        )
    finally:
        os.close(write_end)
    jvm = gateway.jvm
    # As PySpark's SparkContext(conf=...) and SparkSession.builder...getOrCreate() do.
    spark_conf = SparkConf(_jvm=jvm)
    for key, value in conf.items():
        spark_conf.set(key, value)
    for key, value in DEFAULT_CONFIGS.items():
        spark_conf.setIfMissing(key, value)
    jsc = jvm.JavaSparkContext(spark_conf._jconf)
    session_class = SparkSession._get_j_spark_session_class(jvm)
    session = session_class(jsc.sc(), dict(conf))
    session_class.setDefaultSession(session)
    jsc.setJobDescription(WARM_UP_DESCRIPTION)
    session.range(1).count()
    jsc.setJobDescription(None)
    app_id = str(jsc.sc().applicationId())
    gateway.scalelab_app_id = app_id
    gateway.close()  # this process's py4j connections; the JVM's server stays
    return gateway, gateway.proc, read_end, pump


def warm_log_stem() -> str:
    """The warm driver's log name until a kernel takes it, without ``.log``: hidden, so the
    server's log pages do not list the log of a driver no kernel uses."""
    return f".spark-driver-warm-{os.getpid()}"


def name_log_after(kernel_pid: int) -> None:
    """Rename the driver's log to ``spark-driver-<kernel_pid>.log``, the name it would have had
    had that kernel started it (log4j keeps writing to the same file); nothing if there is
    none."""
    folder = log_dir(os.environ)
    try:
        os.rename(folder / f"{warm_log_stem()}.log", folder / f"spark-driver-{kernel_pid}.log")
    except OSError:
        pass


def peer(conn: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of a UNIX socket (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def serve(path: str, offered: dict[str, Any], conf: dict[str, str]) -> int:
    """Start the driver, offer it on ``path``, hand it to one kernel, report its end."""
    try:
        gateway, proc, read_end, pump = start_driver(conf)
    except Exception as exc:  # noqa: BLE001 -- told to the server, which logs it
        first = (str(exc).strip().splitlines() or [""])[0]
        emit("failed", why=f"the driver did not start: {type(exc).__name__}: {first}")
        return 1
    if os.path.exists(path):
        os.unlink(path)  # a keeper killed before it could clean up
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(4)
    listener.settimeout(1.0)
    emit("ready", app_id=gateway.scalelab_app_id, pid=proc.pid, cwd=offered["cwd"])
    try:
        while True:
            if proc.poll() is not None:
                emit("failed", why=f"the warm driver's JVM exited with code {proc.returncode}")
                return 1
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            kernel_pid, uid = peer(conn)
            if uid != os.getuid():
                conn.close()
                continue
            conn.settimeout(REQUEST_TIMEOUT_S)
            try:
                request, _ = spark_warm.read_line(conn)
                wanted = (request or {}).get("take")
                why = (
                    spark_warm.difference(offered, wanted)
                    if isinstance(wanted, dict)
                    else "the request was unreadable"
                )
                if why:
                    spark_warm.send_line(conn, {"taken": False, "why": why})
                    emit("declined", why=why, cwd=(wanted or {}).get("cwd"))
                    conn.close()
                    continue
                pump.stop()
                answer = {
                    "taken": True,
                    "port": gateway.gateway_parameters.port,
                    "secret": gateway.gateway_parameters.auth_token,
                    "pid": proc.pid,
                    "app_id": gateway.scalelab_app_id,
                    "conf": conf,
                }
                spark_warm.send_line(conn, answer, fds=[proc.stdin.fileno(), read_end])
            except OSError:  # the kernel went away while asking: keep the driver
                conn.close()
                if pump._stop.is_set():
                    pump = StderrPump(read_end, pump.lines.known)
                continue
            break
        listener.close()
        os.unlink(path)
        proc.stdin.close()  # the kernel holds the JVM's stdin now
        os.close(read_end)
        name_log_after(kernel_pid)
        emit("taken", kernel_pid=kernel_pid, app_id=gateway.scalelab_app_id)
        conn.settimeout(None)
        os.set_inheritable(conn.fileno(), True)
        # Still the JVM's parent (exec keeps the pid), without PySpark's memory (about 120 MB).
        os.execv(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", WAITER, str(proc.pid), str(conn.fileno())],
        )
    finally:
        if os.path.exists(path) and listener.fileno() >= 0:
            os.unlink(path)


def end_with_driver(*_: Any) -> None:
    """SIGTERM (the server's stop, or its death through ``PR_SET_PDEATHSIG``): end the driver
    this keeper started, then exit.

    A JVM whose stdin closes exits (PySpark's rule), but only once its gateway is up: a keeper
    ended while the JVM still starts would leave it running for ever, with its py4j server and
    no one to connect (seen: ``scalelab up`` killed right after a server started). The keeper
    leads a process group of its own (the server starts it in a new session), which the JVM
    and the JVM's Python workers joined: SIGTERM goes to the group, this process ignoring it.
    Not after a kernel took the driver: the keeper has exec'd into its waiter by then, and the
    JVM ends with that kernel."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.getpgrp() == os.getpid():  # never the group of whoever started a keeper by hand
        try:
            os.killpg(0, signal.SIGTERM)
        except OSError:
            pass
    sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description="ScaleLab's warm Spark driver (keeper)")
    parser.add_argument("--socket", required=True, help="UNIX socket to offer the driver on")
    parser.add_argument("--parent", type=int, required=True, help="the server's pid")
    args = parser.parse_args(argv)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != args.parent:  # the server died before the signal was set
        return 1
    signal.signal(signal.SIGTERM, end_with_driver)
    from scalelab.kernels.spark_session import (
        SparkStartError,
        session_conf,
        silence_harmless_warnings,
    )

    silence_harmless_warnings()
    spark_warm.as_in_a_kernel()
    offered = spark_warm.identity(os.getcwd(), os.environ)
    environ = dict(os.environ)
    try:
        # Hidden (not served) until a kernel takes the driver: then named after that kernel.
        conf = session_conf(environ, log_dir(environ), log_stem=warm_log_stem())
        if not conf["spark.master"].startswith("local"):
            raise SparkStartError(f"the master is {conf['spark.master']}, not local")
        from scalelab.kernels.spark_session import prepare_driver_environment

        prepare_driver_environment(conf)
    except SparkStartError as exc:
        emit("failed", why=str(exc))
        return 1
    return serve(args.socket, offered, conf)


if __name__ == "__main__":
    sys.exit(main())
