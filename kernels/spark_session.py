"""The PySpark kernel's ``spark``: built in a background thread, so the first cell never waits.

:func:`begin` starts the build and puts a :class:`LazySparkSession` (and a lazy ``sc``) in the
notebook; :func:`renew_if_stopped` brings a stand-in back after ``spark.stop()``. The session is
configured from the hub's ``SCALELAB_SPARK_*`` variables, with its own UI port and driver log.
Why: docs/design-notes.md, scalelab.kernels.spark_session.
"""

from __future__ import annotations

import html
import json
import os
import re
import secrets
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from scalelab import envvars
from scalelab.common.ports import free_port
from scalelab.common.stderr_lines import Harmless, Hold, forward
from scalelab.kernels import spark_archive, spark_gpu_grant, spark_gpus, spark_yarn
from scalelab.kernels.spark_defaults import (
    DEFAULT_DRIVER_MEMORY,
    DEFAULT_SPARK_MASTER,
    security_conf,
    spark_conf,
)
from scalelab.kernels.yarn_wait import yarn_wait

#: log4j2 configuration of the driver: WARN and above to the console (the kernel's stderr, hence
#: the server's log) and INFO and above to the driver's log file. Known-harmless warnings are
#: kept off the console (the file still has them): Hadoop's "Unable to load native-hadoop
#: library" (its pure-Java code is used), Spark ML's "regParam is zero" (a plain least-squares
#: fit, as Lab 1 does on purpose), Spark SQL's "Truncated the string representation of a plan"
#: (once per driver, at the first wide plan: a hint for reading plans in logs), the block
#: manager's "Block rdd_... already exists on this machine; not re-adding it" (two tasks computed
#: the same partition of a cached DataFrame at once, as Lab 1's cross-validation with
#: parallelism may: the second copy is dropped, nothing is lost), and the shell's
#: "Setting default log level to WARN" notice (``org.apache.spark.repl.Main`` at the root's
#: level, so Spark does not reset it). The
#: scheduler's and executor's lines about a failed task (``WARN TaskSetManager: Lost task ...``,
#: ``ERROR TaskSetManager: ... aborting job``, ``WARN Executor: ... Result is larger than
#: maxResultSize``, and on YARN ``ERROR YarnScheduler: Lost executor 1 ...: Container killed by
#: YARN for exceeding physical memory limits`` with its ``YarnSchedulerEndpoint`` twin) go to the
#: file only: the job's exception in the cell says the same, below
#: ScaleLab's explanation, and they would stand red above it; so does the uncaught-exception
#: handler's record of the error that ends the driver (an OutOfMemoryError in local mode), which
#: the explanation names with the driver's exit status. A warning or error that does reach the
#: console shows its exception's first line only (``%ex{short}``); the file has the whole trace.
LOG4J2_TEMPLATE = """\
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
rootLogger.appenderRef.file.ref = file
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = info
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = info
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.instrumentation.name = org.apache.spark.ml.util.Instrumentation
logger.instrumentation.filter.harmless.type = RegexFilter
logger.instrumentation.filter.harmless.regex = .*regParam is zero.*
logger.instrumentation.filter.harmless.onMatch = DENY
logger.instrumentation.filter.harmless.onMismatch = NEUTRAL
logger.stringutils.name = org.apache.spark.util.SparkStringUtils
logger.stringutils.filter.harmless.type = RegexFilter
logger.stringutils.filter.harmless.regex = .*Truncated the string representation of a plan.*
logger.stringutils.filter.harmless.onMatch = DENY
logger.stringutils.filter.harmless.onMismatch = NEUTRAL
logger.blocks.name = org.apache.spark.storage.BlockManager
logger.blocks.filter.harmless.type = RegexFilter
logger.blocks.filter.harmless.regex = .*already exists on this machine; not re-adding it.*
logger.blocks.filter.harmless.onMatch = DENY
logger.blocks.filter.harmless.onMismatch = NEUTRAL
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = warn
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex{{short}}
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.immediateFlush = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.tasksets.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksets.additivity = false
logger.tasksets.appenderRef.file.ref = file
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.additivity = false
logger.executor.appenderRef.file.ref = file
logger.uncaught.name = org.apache.spark.util.SparkUncaughtExceptionHandler
logger.uncaught.additivity = false
logger.uncaught.appenderRef.file.ref = file
logger.yarnscheduler.name = org.apache.spark.scheduler.cluster.YarnScheduler
logger.yarnscheduler.additivity = false
logger.yarnscheduler.appenderRef.file.ref = file
logger.yarnendpoint.name = org.apache.spark.scheduler.cluster.\\
    YarnSchedulerBackend$YarnSchedulerEndpoint
logger.yarnendpoint.additivity = false
logger.yarnendpoint.appenderRef.file.ref = file
"""


class SparkStartError(RuntimeError):
    """The kernel's SparkSession could not be created; ``__cause__`` is PySpark's own error."""


def driver_conf(
    *,
    ui_port: int | None = None,
    service_prefix: str = "",
    log4j_file: str | None = None,
    tmp_dir: str | None = None,
    archive_options: Sequence[str] = (),
) -> dict[str, str]:
    """Spark settings the kernel adds to :func:`scalelab.kernels.spark_defaults.spark_conf` (pure).

    Parameters
    ----------
    ui_port
        ``spark.ui.port`` of this driver; None leaves Spark's default (4040 and up).
    service_prefix
        ``JUPYTERHUB_SERVICE_PREFIX`` of the single-user server (``/user/alice/``); when set, the
        UI is served through ``<prefix>sparkui/<ui_port>`` (``spark.ui.proxyBase``).
    log4j_file
        A log4j2 properties file for the driver JVM (``-Dlog4j2.configurationFile``).
    tmp_dir
        The server's temporary folder (``TMPDIR``): the driver JVM's ``java.io.tmpdir``, where
        Spark's artifact folders and the native libraries it unpacks (lz4, snappy) go; a JVM
        ignores ``TMPDIR`` and would use /tmp.
    archive_options
        The driver JVM's options that map the class-data archive
        (:func:`scalelab.kernels.spark_archive.java_options`), if any.

    Returns
    -------
    dict
        ``spark.*`` keys -> values.
    """
    conf: dict[str, str] = {}
    if ui_port is not None:
        conf["spark.ui.port"] = str(ui_port)
        if service_prefix:
            conf["spark.ui.proxyBase"] = ui_proxy_path(service_prefix, ui_port).rstrip("/")
            # The UI's redirects (its root, the logo: to /jobs/) go to <proxyBase>/jobs/ on
            # the address the browser used, not to the hub's /jobs/.
            conf["spark.ui.proxyRedirectUri"] = "/"
    options = list(archive_options)
    if log4j_file is not None:
        options.append(java_property("log4j2.configurationFile", f"file:{log4j_file}"))
    if tmp_dir is not None:
        options.append(java_property("java.io.tmpdir", tmp_dir))
    if options:
        conf["spark.driver.extraJavaOptions"] = " ".join(options)
    return conf


def java_property(name: str, value: str) -> str:
    """``-D<name>=<value>`` for ``spark.driver.extraJavaOptions``, in double quotes when the
    value has white space (Spark splits the options as a shell would) (pure)."""
    option = f"-D{name}={value}"
    return f'"{option}"' if any(c.isspace() for c in value) else option


def ui_proxy_path(service_prefix: str, port: int) -> str:
    """Path of a Spark UI behind the single-user server
    (:mod:`scalelab.hub_ext.server.spark_ui`; not jupyter-server-proxy's ``proxy/<port>/``,
    where the UI's own scripts take the port for the application id).

    ``("/user/alice/", 4041)`` -> ``"/user/alice/sparkui/4041/"``.
    """
    return f"{service_prefix.rstrip('/')}/sparkui/{port}/"


def ops_conf(environ: Mapping[str, str]) -> dict[str, str]:
    """Ops' further Spark settings, ``SCALELAB_SPARK_CONF`` (``c.ScaleLabSpawner.spark_conf``)
    (pure): a JSON object of ``spark.*`` keys to strings; unset or empty: ``{}``.

    Raises
    ------
    SparkStartError
        Not a JSON object of ``spark.*`` keys to strings; the message names the variable and the
        setting to fix.
    """
    raw = environ.get(envvars.SPARK_CONF, "").strip()
    if not raw:
        return {}
    try:
        conf = json.loads(raw)
    except ValueError as exc:
        conf = exc
    if not isinstance(conf, dict) or not all(
        isinstance(k, str) and k.startswith("spark.") and isinstance(v, str)
        for k, v in conf.items()
    ):
        raise SparkStartError(
            f"{envvars.SPARK_CONF} is not a JSON object of spark.* settings to strings "
            f"({raw[:200]!r}): ops fix c.ScaleLabSpawner.spark_conf, e.g. "
            '{"spark.executor.memory": "2g"}'
        )
    return conf


def session_conf(environ: Mapping[str, str], log_dir: Path | None) -> dict[str, str]:
    """The kernel session's settings from its environment (I/O: picks a port, writes log4j2).

    In order, later ones winning: :func:`~scalelab.kernels.spark_defaults.spark_conf` (master,
    driver memory, application name), the server's GPUs in local mode
    (:func:`~scalelab.kernels.spark_gpus.gpu_conf`, its discovery script written beside the
    driver's log), :func:`~scalelab.kernels.spark_yarn.yarn_conf` when the
    master is ``yarn``, Spark's authentication and RPC encryption
    (:func:`~scalelab.kernels.spark_defaults.security_conf`, a new secret each time), ops'
    :func:`ops_conf`, and :func:`driver_conf` (the UI's port and
    proxy, the driver's log4j2 file and class-data archive, added to ops'
    ``spark.driver.extraJavaOptions``).

    Parameters
    ----------
    environ
        The kernel's environment: ``SCALELAB_SPARK_MASTER``, ``SCALELAB_SPARK_DRIVER_MEMORY``,
        ``SCALELAB_SPARK_CONF``, ``SPARK_HOME``, ``JUPYTERHUB_USER``,
        ``JUPYTERHUB_SERVICE_PREFIX``.
    log_dir
        Where the driver's log goes (``spark-driver-<pid>.log``); None: console only.

    Raises
    ------
    SparkStartError
        ``SCALELAB_SPARK_CONF`` is malformed, or the master is ``yarn`` and no Spark
        installation is found.
    """
    log4j_file = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        stem = f"spark-driver-{os.getpid()}"
        log_file = log_dir / f"{stem}.log"
        props = log_dir / f".{stem}.log4j2.properties"
        props.write_text(LOG4J2_TEMPLATE.format(log_file=log_file))
        log4j_file = str(props)
    user = environ.get("JUPYTERHUB_USER") or environ.get("USER") or "notebook"
    conf = spark_conf(
        environ.get(envvars.SPARK_MASTER) or DEFAULT_SPARK_MASTER,
        environ.get(envvars.SPARK_DRIVER_MEMORY) or DEFAULT_DRIVER_MEMORY,
        f"scalelab-{user}",
    )
    gpus = spark_gpus.granted_gpus(environ)
    if gpus and conf["spark.master"].startswith("local"):
        folder = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="scalelab-"))
        script = spark_gpus.write_discovery_script(folder, len(gpus))
        conf.update(spark_gpus.gpu_conf(gpus, conf["spark.master"], str(script)))
    if spark_yarn.is_yarn(conf["spark.master"]):
        try:
            home = spark_yarn.spark_home(environ)
            conf.update(spark_yarn.yarn_conf(home, spark_yarn.staging_dir(environ)))
        except FileNotFoundError as exc:
            raise SparkStartError(f"Spark on YARN: {exc}") from exc
    conf.update(security_conf(conf["spark.master"], secrets.token_hex(32)))  # ops may override
    conf.update(ops_conf(environ))
    if spark_yarn.is_yarn(conf["spark.master"]):  # the kernel finds its application by it
        conf["spark.yarn.tags"] = spark_yarn.with_kernel_tag(
            conf.get("spark.yarn.tags", ""), spark_yarn.kernel_tag()
        )
    # On YARN the Hadoop configuration folder is on the driver's class path: no archive.
    archive = [] if spark_yarn.is_yarn(conf["spark.master"]) else spark_archive.java_options()
    own = driver_conf(
        ui_port=free_port(),
        service_prefix=environ.get("JUPYTERHUB_SERVICE_PREFIX", ""),
        log4j_file=log4j_file,
        tmp_dir=environ.get("TMPDIR") or None,
        archive_options=archive,
    )
    options = " ".join(
        filter(
            None,
            (conf.get("spark.driver.extraJavaOptions"), own.get("spark.driver.extraJavaOptions")),
        )
    )
    conf.update(own)
    if options:
        conf["spark.driver.extraJavaOptions"] = options
    return conf


def prepare_driver_environment(conf: Mapping[str, str]) -> None:
    """Set the variables the driver JVM and its Python workers read, in ``os.environ``, as the
    kernel sets them before its JVM starts: ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` (this
    interpreter, unless set), ``SPARK_LOCAL_IP`` on a loopback driver, YARN's on ``yarn``.

    Raises
    ------
    SparkStartError
        The master is ``yarn`` and its configuration folder or Spark installation is missing,
        or no ResourceManager answers (at once, with its address, where Spark would retry for
        minutes).
    """
    # Executors run Python workers: make them use this kernel's interpreter, not python3 on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if spark_yarn.is_yarn(conf.get("spark.master", "")):
        problem = spark_yarn.missing_conf_dir(os.environ)
        if problem is not None:  # Spark's own refusal would read as a JVM that failed to start
            raise SparkStartError(f"Spark did not start: {problem}")
        down = spark_yarn.unreachable_resourcemanager(os.environ)
        if down is not None:  # Spark would retry for minutes without a word in the notebook
            raise SparkStartError(down)
        try:
            home = spark_yarn.spark_home(os.environ)
            os.environ.update(spark_yarn.yarn_environment(os.environ, home, sys.executable))
        except FileNotFoundError as exc:
            raise SparkStartError(f"Spark did not start: Spark on YARN: {exc}") from exc
    if conf.get("spark.driver.bindAddress") == "127.0.0.1":
        # Spark's UI binds to SPARK_LOCAL_IP, else to every interface (0.0.0.0), whatever
        # spark.driver.bindAddress says: keep it on loopback with the driver, so that it is
        # reached through the student's server (jupyter-server-proxy), not from the network.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def ui_start_race(text: str) -> bool:
    """Whether a driver's failed start is Spark's own race on YARN (pure): the application
    master's web-UI filter is added while the driver attaches its UI's handlers, and Jetty's
    ``ServletHandler`` throws ``ConcurrentModificationException``. Seen on a busy CI host;
    another start does not meet it."""
    return "ConcurrentModificationException" in text and (
        "ServletHandler" in text or "attachAllHandlers" in text
    )


def build_session(conf: Mapping[str, str]) -> Any:
    """Create a SparkSession with ``conf`` (blocking: starts the JVM).

    Returns
    -------
    pyspark.sql.SparkSession

    Raises
    ------
    SparkStartError
        Whatever PySpark raised when the JVM could not start (Java missing, a bad setting),
        as ``__cause__``. A start that met Spark's UI race (:func:`ui_start_race`) is tried
        once more first.
    """
    prepare_driver_environment(conf)
    try:
        from pyspark.sql import SparkSession

        launch_quiet_driver(conf)
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except Exception as exc:  # Py4J's error: read below
            if not ui_start_race(str(exc)):
                raise
            # The failed start stopped its context (and its YARN application): once more.
            session = builder.getOrCreate()
        if "log4j2.configurationFile" not in conf.get("spark.driver.extraJavaOptions", ""):
            # Spark's own log4j2 defaults: keep the notebook quiet. (Ours already send only
            # WARN to the console, and INFO to the driver's log file.)
            session.sparkContext.setLogLevel("WARN")
    except Exception as exc:  # reported as the reason `spark` is unavailable
        first = (str(exc).strip().splitlines() or [""])[0]
        raise SparkStartError(f"Spark did not start: {type(exc).__name__}: {first}") from exc
    return session


#: What the driver JVM writes to stderr at its start that is no error, dropped by its text (every
#: other line of the JVM's stderr still shows): Spark 4's launcher always adds
#: ``--add-modules=jdk.incubator.vector`` (its ``JavaModuleOptions``, no setting), and the JVM
#: announces an incubator module on stderr (no setting either).
JVM_START_LINES = (
    Harmless(
        line=re.compile(rb"WARNING: Using incubator modules: jdk\.incubator\.vector"),
        why="Spark 4's launcher adds the Vector API module to every JVM it starts",
    ),
)


#: The start of a driver JVM's error burst on its stderr: a log4j ``ERROR`` record on the console
#: (:data:`LOG4J2_TEMPLATE`'s pattern) or an uncaught error the JVM prints itself. A driver out
#: of memory prints several (``Exception in thread "Spark Context Cleaner"
#: java.lang.OutOfMemoryError``, ``ERROR Utils: uncaught error in thread ...``) while the cell
#: still waits for its answer, and they came above ScaleLab's explanation (CI, 2026-12-07).
DRIVER_ERROR_BURST = re.compile(
    rb'\d\d:\d\d:\d\d ERROR |Exception in thread "|Exception: java\.lang\.\w*Error'
)
#: Seconds a burst waits, at most, for the cell's end: more than the explaining hook's own wait
#: for the driver's exit (``spark_errors.DRIVER_EXIT_WAIT_S``, 10 s), with a margin for busy
#: cores; a cell that goes on running shows the burst after this.
DRIVER_ERROR_HOLD_S = 30.0
#: The driver JVM's stderr on its way to the kernel's fd 2 (:func:`launch_quiet_driver`): while
#: a cell runs, an error burst waits for the cell's end, so the explanation comes first
#: (:func:`hold_driver_errors_during_cells`).
DRIVER_ERRORS = Hold(2, DRIVER_ERROR_BURST, DRIVER_ERROR_HOLD_S)


def hold_driver_errors_during_cells(shell: Any) -> None:
    """Arm :data:`DRIVER_ERRORS` when a cell of ``shell`` (IPython's ``InteractiveShell``)
    starts and pass on what it held when the cell has ended: after the cell's explanation,
    error and traces."""
    shell.events.register("pre_run_cell", lambda *_: DRIVER_ERRORS.arm())
    shell.events.register("post_run_cell", lambda *_: DRIVER_ERRORS.disarm())


def launch_quiet_driver(conf: Mapping[str, str]) -> None:
    """Start PySpark's driver JVM (its py4j gateway) with ``conf``, as PySpark would at the
    first ``SparkContext``, but with the JVM's stderr passed on to the kernel's without
    :data:`JVM_START_LINES` (pyspark's ``launch_gateway(conf, popen_kwargs=...)``; a thread of
    :func:`scalelab.common.stderr_lines.forward`), and with the frames of each stack trace the
    JVM prints itself (``Exception in thread "..." java.lang.OutOfMemoryError``: an uncaught
    error in one of its threads, past log4j) folded into one line: the cell shows the error's
    line, and ScaleLab's explanation says what to do. While a cell runs, the JVM's error bursts
    wait for the cell's end (:data:`DRIVER_ERRORS`).

    Nothing is done when PySpark already has a gateway (a stopped session's JVM, which PySpark
    reuses). The session built next (``SparkSession.builder...getOrCreate()``) uses this JVM.

    Raises
    ------
    Exception
        Whatever PySpark's ``launch_gateway`` raised (no Java: ``PySparkRuntimeError``).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        # The filter reads from the start, so that a JVM that fails to start still says why,
        # and one that writes much while starting never waits on a full pipe.
        read_end, write_end = os.pipe()
        forward(read_end, 2, JVM_START_LINES, fold_java_frames=True, hold=DRIVER_ERRORS)
        try:
            gateway = launch_gateway(
                SparkConf().setAll(list(conf.items())), popen_kwargs={"stderr": write_end}
            )
        finally:
            os.close(write_end)  # the JVM has its own copy: the thread ends when the JVM does
        SparkContext._ensure_initialized(gateway=gateway)


#: Seconds between two looks of a waiting cell at its ``waiting`` watcher.
WAIT_STEP_S = 1.0
#: Seconds an interrupted wait gives the cancelled start to end before the cell's prompt returns.
CANCEL_WAIT_S = 15.0


class Waiting(Protocol):
    """What watches a cell that waits for ``spark`` (:class:`scalelab.kernels.yarn_wait.YarnWait`):
    ``notice(waited_s)`` tells the student what holds the start, returning True once it did;
    ``cancel()`` gives the start up when the cell is interrupted, returning what it cancelled."""

    def notice(self, waited_s: float) -> bool: ...

    def cancel(self) -> list[str]: ...


class LazySparkSession:
    """Stands for a SparkSession being built in a background thread.

    Any attribute access (``spark.read``, ``spark.range(5)``) waits for the session and is
    then forwarded to it; :meth:`wait` returns the session itself. If the session could not be
    built, each access raises :class:`SparkStartError` (the explanation of the cause is printed
    by :mod:`scalelab.kernels.spark_errors`). With ``start=False`` nothing is built until the
    first access (the stand-in for a session the student stopped: see :func:`renew_if_stopped`).
    With ``waiting``, a cell that waits is told what holds the start, and interrupting it
    cancels the start (:attr:`cancelled`; the next cell gets a new stand-in).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        name: str = "scalelab-spark-start",
        start: bool = True,
        waiting: Waiting | None = None,
    ):
        self._future: Future = Future()
        self._factory = factory
        self._name = name
        self._lock = threading.Lock()
        self._started = False
        self.waiting = waiting
        self.cancelled = False
        self._noticed = False
        if start:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        self._future.set_running_or_notify_cancel()
        thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        thread.start()

    def _run(self) -> None:
        try:
            self._future.set_result(self._factory())
        except BaseException as exc:  # noqa: BLE001 -- handed to whoever touches `spark`
            self._future.set_exception(exc)

    def done(self) -> bool:
        """True once the session is built (or failed)."""
        return self._future.done()

    def wait(self, timeout: float | None = None) -> Any:
        """The SparkSession, waiting up to ``timeout`` seconds (None: as long as it takes);
        starts building it first if it was made with ``start=False``.

        Raises
        ------
        SparkStartError
            The session could not be built.
        TimeoutError
            Not built within ``timeout``.
        """
        self._start()
        if self.waiting is None or timeout is not None:
            return self._future.result(timeout)
        began = time.monotonic()
        try:
            while True:
                try:
                    return self._future.result(WAIT_STEP_S)
                except TimeoutError:
                    if self._future.done():
                        raise  # the start itself failed with a TimeoutError
                    if not self._noticed:
                        self._noticed = self.waiting.notice(time.monotonic() - began)
        except KeyboardInterrupt:
            if not self._future.done() and self.waiting.cancel():
                self.cancelled = True
                try:  # the start ends with the cancelled application: no half-made context
                    self._future.exception(CANCEL_WAIT_S)
                except TimeoutError:
                    pass
            raise

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.wait(), name)

    def __repr__(self) -> str:
        if not self._started:
            return "<SparkSession stopped; touching `spark` starts a new one>"
        if not self.done():
            return "<SparkSession starting in the background; touching `spark` waits for it>"
        if self._future.exception() is not None:
            return f"<SparkSession unavailable: {self._future.exception()}>"
        return repr(self.wait())

    def _repr_html_(self) -> str | None:
        if self.done() and self._future.exception() is None:
            return self.wait()._repr_html_()
        return None


class LazySparkContext:
    """``sc`` while ``spark`` is being built: attribute access waits for ``spark.sparkContext``."""

    def __init__(self, session: LazySparkSession):
        self._session = session

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._session.wait().sparkContext, name)

    def __repr__(self) -> str:
        if self._session.done() and self._session._future.exception() is None:
            return repr(self._session.wait().sparkContext)
        if not self._session._started:
            return "<SparkContext stopped; touching `sc` starts a new one>"
        return "<SparkContext starting in the background; touching `sc` waits for it>"


def ui_url(session: Any, environ: Mapping[str, str]) -> str | None:
    """Where the student opens this driver's Spark UI.

    Returns
    -------
    str or None
        ``/user/<name>/sparkui/<port>/jobs/`` under JupyterHub (a path on the hub's address),
        ``http://127.0.0.1:<port>/jobs/`` otherwise; None when the UI is off. The jobs page
        itself, not the UI's root: the root redirects to the absolute ``/jobs/``, which through
        the hub's proxy lands on the hub's root (404).
    """
    web_url = session.sparkContext.uiWebUrl
    if not web_url:
        return None
    port = int(web_url.rsplit(":", 1)[1].split("/")[0])
    prefix = environ.get("JUPYTERHUB_SERVICE_PREFIX", "")
    root = ui_proxy_path(prefix, port) if prefix else f"http://127.0.0.1:{port}/"
    return f"{root}jobs/"


def ready_line(session: Any, url: str | None) -> str:
    """The line that tells the notebook Spark is ready, and where its UI is (``url``, from
    :func:`ui_url`; None: the UI is off).

    If another process took the chosen ``spark.ui.port`` between the choice and Spark's bind
    (Spark then moves to the next port), the UI's links do not match ``spark.ui.proxyBase``: the
    line says so and how to get a fresh port.
    """
    line = f"Spark {session.version} is ready ({session.sparkContext.master})"
    if not url:
        return line
    line += f"; Spark UI: {url}"
    wanted = session.conf.get("spark.ui.port", None)
    if wanted and f"/{wanted}/" not in url and f":{wanted}/" not in url:
        line += (
            f" (port {wanted} was taken meanwhile, so the UI's links may be broken; "
            "restart the kernel for a new port)"
        )
    return line


def ready_bundle(line: str, url: str | None) -> dict[str, str]:
    """The ready line as a display bundle (pure): ``text/plain`` is ``line``; ``text/html`` the
    same, escaped, with ``url`` (the Spark UI) as a link that opens in a new tab."""
    markup = html.escape(line)
    if url:
        shown = html.escape(url)
        link = (
            f'<a href="{html.escape(url, quote=True)}" target="_blank" rel="noopener">{shown}</a>'
        )
        markup = markup.replace(shown, link, 1)
    return {"text/plain": line, "text/html": f'<span class="scalelab-spark-ready">{markup}</span>'}


#: Python warnings known to be harmless in a course kernel, silenced by their own text only
#: (every other warning still shows): (category, message regex, why).
HARMLESS_WARNINGS = (
    (
        FutureWarning,
        r"PySpark does not yet fully support pandas >= 3",
        "shown at every toPandas(); the labs' conversions are tested with this pandas",
    ),
    (
        UserWarning,
        r"Spark session is not provided\. Tags will not be inherited",
        "pyspark's inheritable_thread_target called without a session, as Hyperopt's "
        "SparkTrials does for each trial: the thread still inherits the job group that "
        "cancels it (scalelab.kernels.search); no job tags are used",
    ),
)


def silence_harmless_warnings() -> None:
    """Filter out :data:`HARMLESS_WARNINGS` (``warnings.filterwarnings``, by message)."""
    for category, message, _why in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


def begin(
    namespace: MutableMapping[str, Any],
    shell: Any,
    log_dir: Path | None,
) -> str:
    """Start building ``spark`` in the background; put ``spark``/``sc`` in ``namespace``.

    Parameters
    ----------
    namespace
        The notebook's globals.
    shell
        The IPython shell (None outside a kernel): before each cell, ready lazy names are
        swapped for the real session, and a line tells the notebook the Spark UI URL once.
    log_dir
        Folder of the driver's log (see :func:`session_conf`).

    Returns
    -------
    str
        The banner line about Spark.
    """
    environ = dict(os.environ)
    silence_harmless_warnings()
    try:
        conf = session_conf(environ, log_dir)
    except SparkStartError as exc:  # a bad setting: the kernel starts, `spark` says why
        failure = exc
        namespace["spark"] = lazy = LazySparkSession(_raiser(failure))
        namespace["sc"] = LazySparkContext(lazy)
        return f"spark: unavailable: {failure}"
    follow_logs = log_dir is not None and spark_yarn.is_yarn(conf["spark.master"])

    def factory() -> Any:
        try:  # a cluster's executor GPUs: the hub's GPU limits first
            release = spark_gpu_grant.claim(conf, environ)
        except spark_gpu_grant.ExecutorGPUsRefused as exc:
            raise SparkStartError(str(exc)) from None
        try:
            session = build_session(conf)
        except BaseException:
            if release is not None:
                release()
            raise
        if release is not None:
            spark_gpu_grant.release_on_stop(session, release)
        if follow_logs:  # the executors' logs, live in the server's log view
            follow_yarn_logs(session, log_dir)
        return session

    # On YARN, a cell waiting for an application the queue has no room for is told why.
    waiting = yarn_wait(conf, environ) if spark_yarn.is_yarn(conf["spark.master"]) else None
    lazy = LazySparkSession(factory, waiting=waiting)
    namespace["spark"] = lazy
    namespace["sc"] = LazySparkContext(lazy)
    lookups_wait_for_the_kernels_session(namespace)
    if shell is not None:
        _swap_when_ready(shell, namespace, lazy, environ)

        def renew(*_args: Any) -> None:
            cancelled = getattr(namespace.get("spark"), "cancelled", False)
            renewed = renew_if_stopped(namespace, factory, waiting)
            if renewed is not None:
                _swap_when_ready(shell, namespace, renewed, environ)
                if not cancelled:  # the cancel said so already
                    print(STOPPED_NOTICE)

        shell.events.register("pre_run_cell", renew)
    return (
        f"spark: {conf['spark.master']} with spark.driver.memory={conf['spark.driver.memory']}, "
        "starting in the background (as `spark` and `sc`; the first use waits for it)"
    )


def building_session(namespace: Mapping[str, Any]) -> LazySparkSession | None:
    """``spark`` of ``namespace`` while it is being built in the background, else None (built,
    failed, or a stopped session's stand-in that nothing has started)."""
    lazy = namespace.get("spark")
    if isinstance(lazy, LazySparkSession) and lazy._started and not lazy.done():
        return lazy
    return None


#: The notebook's globals whose ``spark`` PySpark's session lookups wait for (the latest
#: :func:`begin`'s; one kernel per process).
_lookup_namespace: list[Mapping[str, Any]] = []


def lookups_wait_for_the_kernels_session(namespace: Mapping[str, Any]) -> None:
    """Make PySpark's own lookups of the session, ``SparkSession.getActiveSession()`` and
    ``SparkSession.active()`` (what ``TorchDistributor``, pandas-on-Spark and other libraries
    call), wait for ``namespace``'s ``spark`` while it is built in the background, as if it had
    been there from the start; without this they find none ("No active or default Spark
    session found") in the first seconds of a kernel. Only in the main thread (the cells'):
    the background build itself looks up sessions too. A session stopped by the student is not
    started again by a lookup (``SparkSession.builder`` makes theirs).
    """
    from pyspark.sql import SparkSession

    _lookup_namespace[:] = [namespace]
    if getattr(SparkSession, "_scalelab_lookups_wait", False):
        return
    for name in ("getActiveSession", "active"):
        lookup = getattr(SparkSession, name).__func__  # the classmethods' functions

        def waiting(cls: type, _lookup: Callable[..., Any] = lookup) -> Any:
            lazy = building_session(_lookup_namespace[0]) if _lookup_namespace else None
            if lazy is not None and threading.current_thread() is threading.main_thread():
                try:
                    lazy.wait()
                except Exception:  # noqa: BLE001 -- the lookup says "none"; `spark` says why
                    pass
            return _lookup(cls)

        setattr(SparkSession, name, classmethod(waiting))
    SparkSession._scalelab_lookups_wait = True


def follow_yarn_logs(session: Any, folder: Path) -> Any:
    """Copy the YARN containers' logs of ``session``'s application into ``folder`` while it
    runs (:class:`scalelab.kernels.yarn_logs.ContainerLogMirror`, a daemon thread); returns
    the mirror, or None when the ResourceManager's web address is unknown."""
    from scalelab.kernels.yarn_logs import ContainerLogMirror

    context = session.sparkContext
    rm_web = context._jsc.hadoopConfiguration().get("yarn.resourcemanager.webapp.address")
    if not rm_web:
        return None
    return ContainerLogMirror(
        rm_web, context.applicationId, folder, running=lambda: context._jsc is not None
    ).start()


def _raiser(error: Exception) -> Callable[[], Any]:
    """A session factory that raises ``error``."""

    def fail() -> Any:
        raise error

    return fail


#: Told once, in the first cell after the student stopped ``spark``.
STOPPED_NOTICE = (
    "ScaleLab: `spark` was stopped (spark.stop()); the next use of `spark` or `sc` starts a "
    "new session with the course settings. To choose other settings instead: "
    "spark = SparkSession.builder.config(...).getOrCreate()"
)


def is_stopped(value: Any) -> bool:
    """Whether ``value`` is a PySpark ``SparkSession`` (or the stand-in of a built one) whose
    SparkContext was stopped (``spark.stop()``, ``sc.stop()``: PySpark then sets its
    ``_jsc`` to None), or a stand-in whose start was cancelled. Asks nothing of the JVM; False
    for anything else."""
    if isinstance(value, LazySparkSession):
        if value.cancelled:
            return True
        if not value.done() or value._future.exception() is not None:
            return False
        value = value.wait()
    sql = sys.modules.get("pyspark.sql")
    if sql is None or not isinstance(value, sql.SparkSession):
        return False
    context = getattr(value, "_sc", None)
    return context is not None and context._jsc is None


def renew_if_stopped(
    namespace: MutableMapping[str, Any],
    factory: Callable[[], Any],
    waiting: Waiting | None = None,
) -> LazySparkSession | None:
    """Put a stand-in that builds a new session at its first use in place of a stopped
    ``spark`` (and of ``sc``, when it is that session's context or a stand-in).

    Nothing is built until ``spark`` or ``sc`` is touched, so a student who stopped ``spark``
    to make their own (``SparkSession.builder.config(...).getOrCreate()``) gets theirs.

    Returns
    -------
    LazySparkSession or None
        The stand-in, or None when ``spark`` is not a stopped session (nothing changed).
    """
    stopped = namespace.get("spark")
    if not is_stopped(stopped):
        return None
    if isinstance(stopped, LazySparkSession):
        session = None if stopped.cancelled else stopped.wait()
    else:
        session = stopped
    renewed = LazySparkSession(factory, name="scalelab-spark-restart", start=False, waiting=waiting)
    namespace["spark"] = renewed
    sc = namespace.get("sc")
    if isinstance(sc, LazySparkContext) or sc is getattr(session, "_sc", None):
        namespace["sc"] = LazySparkContext(renewed)
    return renewed


def _swap_when_ready(
    shell: Any, namespace: MutableMapping[str, Any], lazy: LazySparkSession, environ: Mapping
) -> None:
    def swap(*_args: Any) -> None:
        if not lazy.done():
            return
        shell.events.unregister("post_run_cell", swap)
        try:
            session = lazy.wait()
        except Exception:  # noqa: BLE001 -- explained when a cell touches `spark`
            return
        try:
            url = ui_url(session, environ)  # asks the driver JVM (UI address, version)
            line = ready_line(session, url)
        except Exception:  # noqa: BLE001 -- the JVM died in that cell: its error explains it
            return
        if namespace.get("spark") is lazy:
            namespace["spark"] = session
        if isinstance(namespace.get("sc"), LazySparkContext):
            namespace["sc"] = session.sparkContext
        from IPython.display import display

        # Normal output, not stderr (it is no error), with the UI as a link to click.
        display(ready_bundle(line, url), raw=True)

    shell.events.register("post_run_cell", swap)
