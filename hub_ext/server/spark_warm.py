"""A Spark driver started ahead by the single-user server for the next PySpark kernel to take.

:class:`SparkWarmer` keeps at most one warm driver per server (a keeper process,
:mod:`scalelab.kernels.warm_driver`) for the next PySpark kernel of the same identity
(:mod:`scalelab.kernels.spark_warm`); ``GET <base_url>scalelab/api/spark-warm`` is its status.
Why: docs/design-notes.md, scalelab.hub_ext.server.spark_warm.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import signal
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from jupyter_server.base.handlers import APIHandler
from tornado import web
from traitlets import Bool, Float, Int
from traitlets.config import LoggingConfigurable

from scalelab import envvars
from scalelab.kernels.specs import kernel_name

#: The PySpark kernelspec's name (``scalelab-pyspark``).
PYSPARK = kernel_name("pyspark")


def off_reason(environ: Mapping[str, str], enabled: bool, pyspark_offered: bool) -> str | None:
    """Why this server keeps no warm driver, or None when it keeps one (pure).

    Parameters
    ----------
    environ
        The server's environment (``SCALELAB_SPARK_MASTER``).
    enabled
        :attr:`SparkWarmer.enabled`.
    pyspark_offered
        Whether the server offers the PySpark kernel.
    """
    if not enabled:
        return "off (c.SparkWarmer.enabled = False)"
    master = environ.get(envvars.SPARK_MASTER, "").strip()
    if not master:
        return f"no Spark configured for this server ({envvars.SPARK_MASTER} is not set)"
    if not master.startswith("local"):
        return (
            f"the Spark master is {master}: a driver kept idle would hold the cluster's "
            "resources, so only a local master's driver is started ahead"
        )
    if not pyspark_offered:
        return f"the PySpark kernel ({PYSPARK}) is not offered on this server"
    return None


class SparkWarmer(LoggingConfigurable):
    """Keeps at most one Spark driver started ahead, for the server's next PySpark kernel to
    take (see :mod:`scalelab.hub_ext.server.spark_warm`)."""

    enabled = Bool(
        True,
        config=True,
        help="""Start a Spark driver ahead for the next PySpark kernel, so that `spark` is
        usable within about a second of the kernel's start instead of about ten. It costs one
        idle driver JVM per server (about 350-450 MB resident with spark.driver.memory=1g), and
        only servers whose master is local and which offer the PySpark kernel keep one. Set in
        the servers' Jupyter configuration (or their arguments, `c.ScaleLabSpawner.args`:
        `--SparkWarmer.enabled=False`).""",
    )
    rewarm_delay_s = Float(
        10.0,
        min=0.0,
        config=True,
        help="""Seconds after a kernel took the warm driver (or a keeper failed) before the
        next one starts: the new JVM's start does not compete with that kernel's first cells
        for the CPU.""",
    )
    max_failures = Int(
        3,
        min=1,
        config=True,
        help="""Keepers in a row whose driver failed to start (no Java, a bad Spark setting)
        after which the server stops starting warm drivers (its log says why); kernels then
        start their own, as without a warm driver.""",
    )

    def __init__(self, root_dir: str, pyspark_offered: bool, **kwargs: Any):
        super().__init__(**kwargs)
        self.cwd = os.path.realpath(root_dir)
        self.root_dir = self.cwd
        self.folder = ""  # the socket's, made by start() (none while off)
        self.socket_path = ""
        self.state = "off"
        self.why = off_reason(os.environ, self.enabled, pyspark_offered)
        self.app_id: str | None = None
        self.pid: int | None = None
        self.taken = 0
        self.failures = 0
        self.current: asyncio.subprocess.Process | None = None
        self.keepers: set[int] = set()  # pids of every keeper still running
        self._task: asyncio.Future | None = None
        self._ending: set[asyncio.Future] = set()  # taken drivers' keepers, read to their end

    def status(self) -> dict[str, Any]:
        """``state`` (``off``, ``starting``, ``ready``, ``waiting``), ``why`` (when off),
        ``app_id`` and ``pid`` (the ready driver's application id and JVM pid), ``cwd`` (the
        folder it is for), ``taken`` (drivers handed to kernels so far), ``failures`` (in a
        row)."""
        return {
            "state": self.state,
            "why": self.why,
            "app_id": self.app_id,
            "pid": self.pid,
            "cwd": self.cwd,
            "taken": self.taken,
            "failures": self.failures,
        }

    def start(self) -> None:
        """Start keeping a warm driver (on the running event loop), unless it is off."""
        if self.why is not None:
            self.log.info("ScaleLab keeps no warm Spark driver: %s", self.why)
            return
        self.folder = tempfile.mkdtemp(prefix="scalelab-spark-warm-")  # mode 0700
        self.socket_path = os.path.join(self.folder, "driver.sock")
        os.environ[envvars.SPARK_WARM_SOCKET] = self.socket_path  # kernels from now on
        atexit.register(self.stop)
        self._task = asyncio.ensure_future(self._run())

    def keeper_environment(self) -> dict[str, str]:
        """The environment of a PySpark kernel of this server: the server's, plus the
        PySpark kernelspec's ``env``."""
        from scalelab.kernels.specs import kernelspec

        return {**os.environ, **kernelspec("pyspark")["env"]}

    async def _run(self) -> None:
        while self.failures < self.max_failures:
            await self._one()
            await asyncio.sleep(self.rewarm_delay_s)
        self.state = "off"
        self.why = f"{self.failures} warm drivers in a row failed to start (see the log)"
        self.log.warning("ScaleLab stops starting warm Spark drivers: %s", self.why)

    async def _one(self) -> None:
        """Run one keeper until its driver is taken, it fails, or it is replaced."""
        self.state, self.app_id, self.pid = "starting", None, None
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scalelab.kernels.warm_driver",
            "--socket",
            self.socket_path,
            "--parent",
            str(os.getpid()),
            cwd=self.cwd,
            env=self.keeper_environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,  # as kernels: a Ctrl-C at the server's terminal is not its
        )
        self.current = proc
        self.keepers.add(proc.pid)
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                break
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "ready":
                self.state, self.app_id, self.pid = "ready", event["app_id"], event["pid"]
                self.failures = 0
                self.log.info(
                    "ScaleLab: warm Spark driver %s (JVM pid %s) ready for the next PySpark "
                    "kernel in %s",
                    self.app_id,
                    self.pid,
                    self.cwd,
                )
            elif kind == "declined":
                self.log.info("ScaleLab: a kernel did not take the warm driver: %s", event["why"])
                wanted = event.get("cwd")
                if isinstance(wanted, str) and self._follows(wanted):
                    self.cwd = wanted  # the next warm driver is for where kernels start now
                    self.log.info("ScaleLab: the next warm Spark driver is for %s", wanted)
                    proc.terminate()
            elif kind == "taken":
                self.taken += 1
                self.log.info(
                    "ScaleLab: kernel pid %s took the warm Spark driver %s",
                    event.get("kernel_pid"),
                    event.get("app_id"),
                )
                self.state, self.app_id, self.pid, self.current = "waiting", None, None, None
                self._ending.add(asyncio.ensure_future(self._until_end(proc)))
                return
            elif kind == "failed":
                self.log.warning("ScaleLab: the warm Spark driver failed: %s", event["why"])
        await proc.wait()
        self.keepers.discard(proc.pid)
        self.current = None
        if self.state != "ready" or proc.returncode not in (0, -signal.SIGTERM):
            self.failures += 1
        self.state, self.app_id, self.pid = "waiting", None, None

    def _follows(self, wanted: str) -> bool:
        """Whether the next driver may be started in ``wanted`` (a folder under the root)."""
        wanted = os.path.realpath(wanted)
        inside = wanted == self.root_dir or wanted.startswith(self.root_dir + os.sep)
        return inside and wanted != self.cwd and os.path.isdir(wanted)

    async def _until_end(self, proc: asyncio.subprocess.Process) -> None:
        """Read a taken driver's keeper to its end (it tells its kernel the JVM's status)."""
        assert proc.stdout is not None
        while await proc.stdout.readline():
            pass
        await proc.wait()
        self.keepers.discard(proc.pid)
        self._ending.discard(asyncio.current_task())

    def stop(self) -> None:
        """End the keepers (at the server's exit): a driver no kernel took ends with its
        keeper; a taken one ends with its kernel."""
        for pid in list(self.keepers):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.keepers.clear()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        try:
            os.rmdir(self.folder)
        except OSError:
            pass


class SparkWarmHandler(APIHandler):
    """``GET /scalelab/api/spark-warm``: the warm driver's :meth:`SparkWarmer.status`."""

    _track_activity = False  # a status probe is not the student's activity

    @web.authenticated
    async def get(self):
        self.finish(json.dumps(self.settings["scalelab_spark_warmer"].status()))


def pyspark_offered(serverapp: Any) -> bool:
    """Whether ``serverapp``'s kernelspec manager gives out the PySpark kernel (its
    allow-list honoured)."""
    try:
        serverapp.kernel_spec_manager.get_kernel_spec(PYSPARK)
    except Exception:  # noqa: BLE001 -- NoSuchKernel, or not offered (KernelNotOffered)
        return False
    return True


def setup(serverapp: Any) -> SparkWarmer:
    """Create the server's :class:`SparkWarmer`, register its status handler, and start it."""
    warmer = SparkWarmer(serverapp.root_dir, pyspark_offered(serverapp), parent=serverapp)
    serverapp.web_app.settings["scalelab_spark_warmer"] = warmer
    base = serverapp.web_app.settings["base_url"].rstrip("/")
    serverapp.web_app.add_handlers(".*$", [(f"{base}/scalelab/api/spark-warm", SparkWarmHandler)])
    serverapp.io_loop.add_callback(warmer.start)
    return warmer
