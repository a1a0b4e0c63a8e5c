"""A PySpark kernel started ahead by the single-user server, handed to the next request for one.

:class:`WarmKernelManager` is the server's kernel manager (ScaleLab's culling one) keeping one
started ``scalelab-pyspark`` kernel whose own start-up built ``spark`` and ran first jobs; the
next start request for a PySpark kernel in the same folder gets it. ``GET
<base_url>scalelab/api/spark-warm`` is its status.
Why: docs/design-notes.md, scalelab.hub_ext.server.warm_kernel.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import uuid
from collections.abc import Mapping
from typing import Any

from jupyter_server._tz import utcnow
from jupyter_server.base.handlers import APIHandler
from tornado import web
from traitlets import Bool, Float, Int

from scalelab import envvars
from scalelab.hub_ext.server.kernel_culling import ScaleLabKernelManager
from scalelab.kernels.specs import kernel_name

#: The PySpark kernelspec's name (``scalelab-pyspark``).
PYSPARK = kernel_name("pyspark")
#: What the warm kernel runs, silently (no history, no output, no cell events), once started:
#: five small Spark jobs, so that Spark SQL's classes are loaded and the JVM has compiled a
#: job's path before the student's first cell (a `spark.range(3).count()` after a first cell
#: then gives its result in about 0.17 s instead of 0.38: docs/benchmarks.md, kernel_start.py;
#: its cost: about 1 s of CPU and 40 MiB of resident memory more per warm kernel).
WARM_UP = (
    "spark.sparkContext.setJobDescription("
    "'ScaleLab: warm-up, run before a notebook took this kernel')\n"
    "for _ in range(5):\n"
    "    spark.range(3).count()\n"
    "spark.sparkContext.setJobDescription(None)\n"
)
#: What the warm-up reads back: the Spark application's id, for the status and the log.
APP_ID = "spark.sparkContext.applicationId"
#: Seconds the warm-up may take: the driver JVM's start (about 10 s on an idle core) and a job.
WARM_UP_TIMEOUT_S = 300.0
#: Environment variables jupyter_server sets per kernel (``JPY_SESSION_NAME``: the notebook's
#: path): not compared when a request is matched with the warm kernel, set at hand-over.
PER_KERNEL_PREFIX = "JPY_"


def off_reason(
    environ: Mapping[str, str], enabled: bool, pyspark_offered: bool, on_cluster: bool = True
) -> str | None:
    """Why this server keeps no warm PySpark kernel, or None when it keeps one (pure).

    Parameters
    ----------
    environ
        The server's environment (``SCALELAB_SPARK_MASTER``).
    enabled
        :attr:`WarmKernelManager.warm_pyspark`.
    pyspark_offered
        Whether the server offers the PySpark kernel.
    on_cluster
        :attr:`WarmKernelManager.warm_on_cluster`: whether a master other than ``local``
        (YARN, a standalone or Kubernetes master) gets one too.
    """
    if not enabled:
        return "off (c.WarmKernelManager.warm_pyspark = False)"
    master = environ.get(envvars.SPARK_MASTER, "").strip()
    if not master:
        return f"no Spark configured for this server ({envvars.SPARK_MASTER} is not set)"
    if not on_cluster and not is_local(master):
        return (
            f"the Spark master is {master} and c.WarmKernelManager.warm_on_cluster is off: "
            "only a kernel with a local master is started ahead"
        )
    if not pyspark_offered:
        return f"the PySpark kernel ({PYSPARK}) is not offered on this server"
    return None


def is_local(master: str) -> bool:
    """Whether the Spark ``master`` URL runs everything in the driver: ``local`` and
    ``local[...]``; not ``local-cluster[...]``, YARN or any other cluster (pure)."""
    return master == "local" or master.startswith("local[")


def environment_difference(started: Mapping[str, str], wanted: Mapping[str, str]) -> str | None:
    """Why a kernel started with environment ``started`` does not fit a request for
    ``wanted``: the differing variables' names (never values), ``JPY_*`` left out; None when it
    fits (pure)."""
    names = sorted(
        k
        for k in set(started) | set(wanted)
        if not k.startswith(PER_KERNEL_PREFIX) and started.get(k) != wanted.get(k)
    )
    if not names:
        return None
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"another environment ({shown})"


def session_code(session: str) -> str:
    """What the warm kernel runs, silently, when handed to a notebook: the notebook's path,
    which ipykernel reads only at its start (``JPY_SESSION_NAME``, ``__session__``) (pure)."""
    return (
        "import os as _scalelab_os\n"
        f"_scalelab_os.environ['JPY_SESSION_NAME'] = {session!r}\n"
        f"__session__ = {session!r}\n"
        "del _scalelab_os\n"
    )


class WarmKernelManager(ScaleLabKernelManager):
    """ScaleLab's kernel manager with one PySpark kernel started ahead, hidden from the REST
    API, the Spark UI pages and culling until a start request takes it."""

    warm_pyspark = Bool(
        True,
        config=True,
        help="""Keep one PySpark kernel started ahead, `spark` built and first jobs run, for
        the next notebook that asks for a PySpark kernel in the same folder: its `spark` is
        usable at once instead of after about ten seconds. It costs one idle kernel and its
        driver JVM per server (about 500-600 MB resident with spark.driver.memory=1g); on a
        cluster master see `warm_on_cluster`. Set in the servers' arguments
        (`c.Spawner.args = ["--WarmKernelManager.warm_pyspark=False"]`).""",
    )
    rewarm_delay_s = Float(
        10.0,
        min=0.0,
        config=True,
        help="""Seconds after the warm kernel was taken (or failed) before the next one
        starts, so that its start does not compete with the first cells of the one taken.""",
    )
    warm_on_cluster = Bool(
        True,
        config=True,
        help="""Keep the warm PySpark kernel also where the servers' Spark master is a cluster
        (YARN, a standalone or Kubernetes master): its `spark` is then a running application
        on the cluster, with the student's identity, queue and limits, so the first cluster
        result comes in about a second instead of 15-20. While it waits it holds the
        application's containers (its application master and executors), so it is released
        after `cluster_release_s`.""",
    )
    cluster_release_s = Float(
        300.0,
        min=0.0,
        config=True,
        help="""Seconds a warm kernel on a cluster master waits for a notebook before it is
        shut down, its application ended and its containers freed: an idle student holds no
        cluster resources. The next one starts when the student next starts a kernel. 0 keeps
        it until the server stops (or the hub culls the server).""",
    )
    max_warm_failures = Int(
        3,
        min=1,
        config=True,
        help="""Warm kernels in a row whose start or warm-up failed (no Java, a bad Spark
        setting) after which the server starts no more (its log says why); notebooks then start
        their kernels as without one.""",
    )

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.why_off: str | None = "not started yet"
        self.warming: str | None = None  # the id of the kernel being started or warmed up
        self.warm_id: str | None = None  # the id of the kernel ready to be taken
        self.warm_cwd = ""
        self.warm_env: dict[str, str] = {}
        self.app_id: str | None = None
        self.taken = 0
        self.failures = 0
        self.released = False  # a warm kernel on a cluster master was released, unused
        self._filling: asyncio.Future | None = None
        self._releasing: asyncio.TimerHandle | None = None
        self._discarding: set[asyncio.Future] = set()

    # -- what the REST API, the Spark UI pages and culling see -------------------------------

    def _hidden(self) -> set[str]:
        return {k for k in (self.warming, self.warm_id) if k is not None}

    def list_kernel_ids(self) -> list[str]:
        """The kernels' ids, less the warm one's (nobody's yet)."""
        hidden = self._hidden()
        return [k for k in super().list_kernel_ids() if k not in hidden]

    def list_kernels(self) -> list[dict[str, Any]]:
        """The kernels' models, less the warm one's."""
        hidden = self._hidden()
        return [k for k in super().list_kernels() if k["id"] not in hidden]

    async def cull_kernel_if_idle(self, kernel_id: str) -> None:
        """ScaleLab's culling, never of the warm kernel (idle by design until taken)."""
        if kernel_id not in self._hidden():
            await super().cull_kernel_if_idle(kernel_id)

    def start_watching_activity(self, kernel_id: str) -> None:
        """jupyter_server's activity watch (the server's and the kernel's ``last_activity``),
        not for the warm kernel until it is taken: its warm-up is nobody's activity."""
        if kernel_id not in self._hidden():
            super().start_watching_activity(kernel_id)

    def _pid(self, kernel_id: str | None) -> int | None:
        """The process id of a kernel this manager runs, or None (none, or gone)."""
        if kernel_id is None or kernel_id not in self:
            return None
        pid = getattr(self.get_kernel(kernel_id).provisioner, "pid", None)
        return pid if isinstance(pid, int) else None

    def hidden_pids(self) -> set[int]:
        """The process ids of the warm kernel and of one being warmed."""
        return {pid for pid in map(self._pid, self._hidden()) if pid is not None}

    def status(self) -> dict[str, Any]:
        """``state`` (``off``, ``starting``, ``ready``, ``waiting``, ``released``: a warm
        kernel on a cluster master was not taken in time and ended), ``why`` (when off),
        ``kernel_id``, ``pid`` (the kernel process's) and ``app_id`` (its Spark application's)
        of the ready kernel, ``cwd`` (its folder), ``taken`` (kernels handed over so far) and
        ``failures`` (in a row)."""
        if self.why_off is not None:
            state = "off"
        elif self.warm_id is not None:
            state = "ready"
        elif self.warming is not None:
            state = "starting"
        else:
            state = "released" if self.released else "waiting"
        return {
            "state": state,
            "why": self.why_off,
            "kernel_id": self.warm_id,
            "pid": self._pid(self.warm_id),
            "app_id": self.app_id if self.warm_id else None,
            "cwd": self.warm_cwd,
            "taken": self.taken,
            "failures": self.failures,
        }

    # -- start requests ----------------------------------------------------------------------

    def begin(self, pyspark_offered: bool) -> None:
        """Start keeping a warm kernel (on the running event loop), unless it is off."""
        self.why_off = off_reason(
            os.environ, self.warm_pyspark, pyspark_offered, self.warm_on_cluster
        )
        if self.why_off is not None:
            self.log.info("ScaleLab keeps no warm PySpark kernel: %s", self.why_off)
            return
        self._fill(os.path.realpath(self.root_dir), delay_s=0.0)

    async def start_kernel(  # type: ignore[override]
        self, *, kernel_id: str | None = None, path: str | None = None, **kwargs: Any
    ) -> str:
        """jupyter_server's start (which its session manager and REST handlers call); a new
        PySpark kernel is the warm one when it is ready for the same folder and environment."""
        name = kwargs.get("kernel_name") or self.default_kernel_name
        env = kwargs.get("env") or dict(os.environ)
        if kernel_id is None and name == PYSPARK and self.warm_id is not None:
            taken = await self._take(self._cwd(path, env), env)
            if taken is not None:
                return taken
        started = await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)
        if self.released and self.why_off is None:
            # The student is back: the next warm kernel, for where they work, after this
            # kernel's own start.
            self.released = False
            self._fill(self._cwd(path, env), delay_s=self.rewarm_delay_s)
        return started

    def _cwd(self, path: str | None, env: Mapping[str, str]) -> str:
        """The real folder a kernel for ``path`` starts in (jupyter_server's rule)."""
        return os.path.realpath(
            self.cwd_for_path(path, env=env) if path is not None else self.root_dir
        )

    async def _take(self, cwd: str, env: Mapping[str, str]) -> str | None:
        """Hand the warm kernel over for a notebook in ``cwd`` with environment ``env``, or
        None (the request starts a kernel of its own; the next warm one is for ``cwd``)."""
        kernel_id = self.warm_id
        if kernel_id is None:
            return None
        self.warm_id = None  # before any await: never handed to two requests
        why = environment_difference(self.warm_env, env)
        if cwd != self.warm_cwd:
            why = f"another folder ({cwd}; the warm kernel's is {self.warm_cwd})"
        if why is None and (
            kernel_id not in self or not await self.get_kernel(kernel_id).is_alive()
        ):
            why = "the warm kernel had ended"
        if why is not None:
            self.log.info("ScaleLab: the warm PySpark kernel does not fit: %s", why)
            await self._discard(kernel_id)
            self._fill(cwd, delay_s=self.rewarm_delay_s)  # after the request's own start
            return None
        kernel = self.get_kernel(kernel_id)
        session = env.get("JPY_SESSION_NAME", "")
        if session:
            try:
                await self._run_silently(kernel_id, session_code(session), 30)
            except (RuntimeError, TimeoutError) as exc:
                self.log.warning("ScaleLab: the warm PySpark kernel failed at hand-over: %s", exc)
                await self._discard(kernel_id)
                self._fill(cwd, delay_s=self.rewarm_delay_s)
                return None
        super().start_watching_activity(kernel_id)
        kernel.execution_state = "idle"
        self.last_kernel_activity = kernel.last_activity = utcnow()
        self.taken += 1
        self.log.info("ScaleLab: a notebook took the warm PySpark kernel %s", kernel_id)
        self._fill(cwd, delay_s=self.rewarm_delay_s)
        return kernel_id

    def _fill(self, cwd: str, delay_s: float) -> None:
        """Start the next warm kernel, for ``cwd``, in ``delay_s`` seconds (replacing one
        planned)."""
        if self._filling is not None and not self._filling.done():
            self._filling.cancel()
        self._filling = asyncio.ensure_future(self._start_warm(cwd, delay_s))

    async def _start_warm(self, cwd: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if self.failures >= self.max_warm_failures:
            self.why_off = f"{self.failures} warm kernels in a row failed to start (see the log)"
            self.log.warning("ScaleLab starts no more warm PySpark kernels: %s", self.why_off)
            return
        kernel_id = self.warming = str(uuid.uuid4())
        env = dict(os.environ)
        path = os.path.relpath(cwd, os.path.realpath(self.root_dir))
        try:
            await super().start_kernel(
                kernel_id=kernel_id,
                kernel_name=PYSPARK,
                path="" if path == "." else path,
                env=env,
            )
            self.add_restart_callback(kernel_id, lambda: self._restarted(kernel_id), "restart")
            found = await self._run_silently(
                kernel_id, WARM_UP, WARM_UP_TIMEOUT_S, {"app_id": APP_ID}
            )
            app_id = found.get("app_id")
        except Exception as exc:  # noqa: BLE001 -- logged; notebooks then start their own
            self.failures += 1
            self.log.warning("ScaleLab: a warm PySpark kernel failed to start: %s", exc)
            await self._discard(kernel_id)
            self._fill(cwd, delay_s=self.rewarm_delay_s)
            return
        finally:
            self.warming = None
        self.failures = 0
        self.warm_id, self.warm_cwd, self.warm_env, self.app_id = kernel_id, cwd, env, app_id
        master = env.get(envvars.SPARK_MASTER, "")
        if self.cluster_release_s > 0 and not is_local(master):
            self._releasing = asyncio.get_running_loop().call_later(
                self.cluster_release_s, self._release, kernel_id
            )
        self.log.info(
            "ScaleLab: warm PySpark kernel %s (Spark application %s) ready in %s",
            kernel_id,
            app_id,
            cwd,
        )

    def _release(self, kernel_id: str) -> None:
        """The warm kernel on a cluster master was not taken within
        :attr:`cluster_release_s`: shut down, so that its application's containers are freed."""
        if kernel_id != self.warm_id:
            return  # taken, or replaced, meanwhile
        self.warm_id = None
        self.released = True
        self.log.info(
            "ScaleLab: the warm PySpark kernel %s (Spark application %s) was not taken in %.0f s:"
            " released, its containers freed; the next one starts with the next kernel started",
            kernel_id,
            self.app_id,
            self.cluster_release_s,
        )
        task = asyncio.ensure_future(self._discard(kernel_id))
        self._discarding.add(task)
        task.add_done_callback(self._discarding.discard)

    def _restarted(self, kernel_id: str) -> None:
        """The warm kernel died and jupyter_client started it again: without its warm-up, it
        is no longer warm; the next one is started."""
        if kernel_id == self.warm_id:
            self.warm_id = None
            task = asyncio.ensure_future(self._discard(kernel_id))
            self._discarding.add(task)
            task.add_done_callback(self._discarding.discard)
            self._fill(self.warm_cwd, delay_s=self.rewarm_delay_s)

    async def _discard(self, kernel_id: str) -> None:
        if kernel_id in self:
            try:
                await super().shutdown_kernel(kernel_id, now=True)
            except Exception as exc:  # noqa: BLE001 -- gone meanwhile
                self.log.debug("ScaleLab: the warm kernel %s was gone: %s", kernel_id, exc)

    async def _run_silently(
        self,
        kernel_id: str,
        code: str,
        timeout_s: float,
        expressions: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Execute ``code`` in the kernel with IPython's ``silent`` (no history, no cell
        events, no output), then evaluate ``expressions`` (name -> Python expression, the
        execute request's ``user_expressions``); return each one's text (its ``text/plain``,
        quotes of a string removed), those that failed left out.

        Raises
        ------
        RuntimeError
            The code failed in the kernel (the exception's name and message), or the kernel
            ended meanwhile.
        TimeoutError
            No reply within ``timeout_s`` seconds.
        """
        kernel = self.get_kernel(kernel_id)
        client = kernel.client()
        client.start_channels(iopub=False, stdin=False, hb=False, control=False)
        deadline = asyncio.get_running_loop().time() + timeout_s
        try:
            msg_id = client.execute(
                code, silent=True, store_history=False, user_expressions=dict(expressions or {})
            )
            while True:
                try:
                    reply = await client.get_shell_msg(timeout=1.0)
                except queue.Empty:
                    if not await kernel.is_alive():
                        raise RuntimeError("the kernel ended") from None
                    if asyncio.get_running_loop().time() > deadline:
                        raise TimeoutError(f"no reply in {timeout_s:.0f} s") from None
                    continue
                if reply["parent_header"].get("msg_id") == msg_id:
                    break
        finally:
            client.stop_channels()
        content = reply["content"]
        if content.get("status") != "ok":
            raise RuntimeError(f"{content.get('ename')}: {content.get('evalue')}")
        found = {}
        for name, value in (content.get("user_expressions") or {}).items():
            text = (value.get("data") or {}).get("text/plain")
            if value.get("status") == "ok" and isinstance(text, str):
                found[name] = text.strip("'\"")
        return found

    async def shutdown_all(self, now: bool = False) -> None:  # type: ignore[override]
        """Every kernel, the warm one and one being warmed included (at the server's exit)."""
        if self._filling is not None:
            self._filling.cancel()
        if self._releasing is not None:
            self._releasing.cancel()
        for kernel_id in self._hidden():
            self.warm_id = self.warming = None
            await self._discard(kernel_id)
        await super().shutdown_all(now=now)


class SparkWarmHandler(APIHandler):
    """``GET /scalelab/api/spark-warm``: the warm kernel's :meth:`WarmKernelManager.status`."""

    _track_activity = False  # a status probe is not the student's activity

    @web.authenticated
    async def get(self):
        manager = self.kernel_manager
        if isinstance(manager, WarmKernelManager):
            status = manager.status()
        else:
            status = {"state": "off", "why": "the server's kernel manager keeps no warm kernel"}
        self.finish(json.dumps(status))


def pyspark_offered(serverapp: Any) -> bool:
    """Whether ``serverapp``'s kernelspec manager gives out the PySpark kernel (its
    allow-list honoured)."""
    try:
        serverapp.kernel_spec_manager.get_kernel_spec(PYSPARK)
    except Exception:  # noqa: BLE001 -- NoSuchKernel, or not offered (KernelNotOffered)
        return False
    return True


def setup(serverapp: Any) -> None:
    """Register the status handler, and start the warm kernel (if the server's kernel manager
    is a :class:`WarmKernelManager`)."""
    base = serverapp.web_app.settings["base_url"].rstrip("/")
    serverapp.web_app.add_handlers(".*$", [(f"{base}/scalelab/api/spark-warm", SparkWarmHandler)])
    manager = serverapp.kernel_manager
    if isinstance(manager, WarmKernelManager):
        offered = pyspark_offered(serverapp)
        serverapp.io_loop.add_callback(lambda: manager.begin(offered))
