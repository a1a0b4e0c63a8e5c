"""What a ScaleLab kernel does when it starts: names ready in the notebook, and a one-line banner.

Every kernel gets ``store`` (an fsspec file system rooted at the course store, see
:func:`scalelab.store.open_store`) and ``STORE_URL``; the PySpark kernel also gets ``spark`` (a
``SparkSession``) and ``sc``. A broken setting never kills the kernel: the kernel starts, the
name is left out, and the banner says what failed and which setting to fix.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

from scalelab import envvars
from scalelab.store import StoreError, open_store, store_settings

#: Spark master when the hub set none: all cores of this machine.
DEFAULT_SPARK_MASTER = "local[*]"
#: Spark driver memory when the hub set none.
DEFAULT_DRIVER_MEMORY = "1g"


def spark_conf(master: str, driver_memory: str, app_name: str) -> dict[str, str]:
    """Spark settings of the PySpark kernel's session (pure).

    Returns
    -------
    dict
        ``spark.*`` keys -> values, for ``SparkSession.builder.config``. The driver binds to
        loopback in local mode, so the session works on a machine with no resolvable host name.
    """
    conf = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.driver.memory": driver_memory,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if master.startswith("local"):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def start_spark(environ: MutableMapping[str, str] | None = None) -> Any:
    """Create the kernel's SparkSession from the hub's settings (``SCALELAB_SPARK_*``).

    Returns
    -------
    pyspark.sql.SparkSession

    Raises
    ------
    Exception
        Whatever PySpark raises when the JVM cannot start (Java missing, bad setting).
    """
    env = os.environ if environ is None else environ
    # Executors run Python workers: make them use this kernel's interpreter, not python3 on PATH.
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    conf = spark_conf(
        env.get(envvars.SPARK_MASTER) or DEFAULT_SPARK_MASTER,
        env.get(envvars.SPARK_DRIVER_MEMORY) or DEFAULT_DRIVER_MEMORY,
        f"scalelab-{env.get('JUPYTERHUB_USER') or env.get('USER') or 'notebook'}",
    )
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def gpu_banner(environ: MutableMapping[str, str] | None = None) -> str:
    """``"GPUs: <uuids>"`` or ``"CPU only"``, from the GPUs the spawner gave this server."""
    env = os.environ if environ is None else environ
    gpus = [g for g in env.get(envvars.GPUS, "").split(",") if g]
    return f"GPUs: {', '.join(gpus)}" if gpus else "CPU only"


def session_warning(environ: Mapping[str, str], now: float) -> str | None:
    """The warning a kernel prints before a cell near the end of the server's GPU session.

    Parameters
    ----------
    environ
        The kernel's environment (``SCALELAB_GPU_DEADLINE``, ``SCALELAB_GPU_WARNING_S``, set by
        the spawner when ``GPUPolicy.max_gpu_session_hours`` limits GPU sessions).
    now
        Seconds since the epoch.

    Returns
    -------
    str or None
        The warning with the local time the server stops, or None outside the warning window.
    """
    try:
        deadline = float(environ[envvars.GPU_DEADLINE])
        window = float(environ.get(envvars.GPU_WARNING_S, "900"))
    except (KeyError, ValueError):
        return None
    if now < deadline - window:
        return None
    at = time.strftime("%H:%M", time.localtime(deadline))
    minutes = max(0, round((deadline - now) / 60))
    return (
        f"ScaleLab: your GPU session ends at {at} (in about {minutes} min); the server will be "
        "stopped then. Your files are kept: save your notebook and checkpoints now."
    )


def _warn_before_cells(shell: Any) -> None:
    def warn(*_args: Any) -> None:
        message = session_warning(os.environ, time.time())
        if message:
            print(message, file=sys.stderr)

    shell.events.register("pre_run_cell", warn)


def start(flavour: str, namespace: MutableMapping[str, Any]) -> None:
    """Run a kernel's start-up: put ``store``/``STORE_URL`` (and ``spark``/``sc``) in ``namespace``.

    Prints one banner line per item; never raises, so a bad setting cannot kill the kernel.
    """
    lines = [f"ScaleLab {flavour} kernel: {gpu_banner()}"]
    try:
        url, _ = store_settings()
        namespace["store"] = open_store()
        namespace["STORE_URL"] = url
        lines.append(f"course store: {url} (as `store`, an fsspec file system)")
    except StoreError as exc:
        lines.append(f"course store unavailable: {exc}")
    if flavour == "pyspark":
        try:
            spark = start_spark()
        except Exception as exc:  # noqa: BLE001 -- any start failure must leave the kernel alive
            lines.append(
                f"Spark did not start: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}. "
                "Check that Java 17 is installed (java -version) and the hub's Spark settings."
            )
        else:
            namespace["spark"] = spark
            namespace["sc"] = spark.sparkContext
            lines.append(f"spark: {spark.sparkContext.master}, Spark {spark.version} (as `spark`)")
    if envvars.GPU_DEADLINE in os.environ:
        at = time.strftime("%H:%M", time.localtime(float(os.environ[envvars.GPU_DEADLINE])))
        lines.append(f"GPU session ends at {at} (the server stops then; files are kept)")
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            _warn_before_cells(shell)
    _show_notices()
    print("\n".join(lines))


def _show_notices() -> None:
    """Print the hub's notices to the student (an idle-GPU warning) before the next cell."""
    from IPython import get_ipython

    from scalelab.kernels import notices

    shell = get_ipython()
    if shell is not None:
        notices.install(shell)
