"""A real Spark standalone cluster on loopback for the tests: a master and workers started from
pyspark's own ``spark-class`` (no daemon scripts), each a process of its own, stopped after."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark

from scalelab.common.ports import free_port

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    """Wait until something listens on ``port`` (AssertionError with ``log``'s end if ``proc``
    exits first or ``timeout_s`` passes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on {port}:\n{log.read_text()[-3000:]}")


def wait_text(log: Path, text: str, timeout_s: float = 180, count: int = 1) -> None:
    """Wait until ``text`` stands ``count`` times in the file ``log``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().count(text) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared in {log}:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def standalone_cluster(
    folder: Path, workers: int = 1, cores: int = 1, memory: str = "1g"
) -> Iterator[str]:
    """A Spark standalone master and ``workers`` workers (``cores`` cores, ``memory`` each) on
    127.0.0.1, their logs in ``folder``; yields the master URL ``spark://127.0.0.1:<port>``."""
    port, ui = free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(folder / "work"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        log = folder / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_CLASS), *argv], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        procs.append(proc)
        return proc, log

    folder.mkdir(parents=True, exist_ok=True)
    try:
        master, master_log = start(
            "master",
            [MASTER, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
        )
        wait_port(port, master, master_log)
        for i in range(workers):
            _proc, log = start(
                f"worker-{i}",
                [
                    WORKER,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(free_port()),
                    f"spark://127.0.0.1:{port}",
                ],
            )
            wait_text(log, "Successfully registered with master")
        yield f"spark://127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
