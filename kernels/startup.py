"""What a ScaleLab kernel does when it starts: names ready in the notebook, and a one-line banner.

Every kernel gets ``store`` (an fsspec file system of the course store: the student's home and
the data sets under JupyterHub, see :func:`scalelab.store.access.session.kernel_store`) and
``STORE_URL``; the PySpark kernel also gets ``spark`` (a ``SparkSession``) and ``sc``. A broken
setting never kills the kernel: the kernel starts, the banner says what failed and which setting
to fix, and a broken store's ``store`` raises that message at first use (Spark: name left out).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

from scalelab import envvars
from scalelab.kernels import import_order
from scalelab.kernels.spark_gpus import granted_gpus
from scalelab.store.access.session import kernel_store


def gpu_banner(environ: MutableMapping[str, str] | None = None) -> str:
    """``"GPUs: <uuids>"`` or ``"CPU only"``, from the GPUs the spawner gave this server
    (:func:`scalelab.kernels.spark_gpus.granted_gpus`)."""
    gpus = granted_gpus(os.environ if environ is None else environ)
    return f"GPUs: {', '.join(gpus)}" if gpus else "CPU only"


def tensorflow_banner(environ: Mapping[str, str]) -> str:
    """The TensorFlow kernel's line on GPU memory growth (``TF_FORCE_GPU_ALLOW_GROWTH``)."""
    if environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true":
        return "TensorFlow: GPU memory growth on (a second notebook can share the GPU)"
    return (
        "TensorFlow: GPU memory growth OFF (TF_FORCE_GPU_ALLOW_GROWTH is not true): this "
        "notebook takes all GPU memory at its first GPU operation"
    )


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
            print(message)  # a notice, not an error: normal output

    shell.events.register("pre_run_cell", warn)


def _begin_spark(namespace: MutableMapping[str, Any]) -> str:
    """Start ``spark`` in the background, explain Spark failures in failing cells, and tell
    the server where the Spark UI is (:mod:`scalelab.kernels.spark_ui_record`)."""
    from IPython import get_ipython

    from scalelab.common.logfiles import log_dir
    from scalelab.kernels import (
        spark_errors,
        spark_interrupt,
        spark_session,
        spark_ui_record,
    )

    shell = get_ipython()
    if shell is not None:
        spark_errors.install(shell, namespace)
        spark_session.hold_driver_errors_during_cells(shell)  # explanation first
        spark_interrupt.install(shell)  # an interrupted cell's jobs are cancelled
        spark_ui_record.install(shell)  # where the Spark UI is, for Course > Spark UI...
    return spark_session.begin(namespace, shell, log_dir(os.environ))


def start(flavour: str, namespace: MutableMapping[str, Any]) -> None:
    """Run a kernel's start-up: put ``store``/``STORE_URL`` (and ``spark``/``sc``) in ``namespace``.

    Prints one banner line per item; never raises, so a bad setting cannot kill the kernel.
    """
    import_order.install()  # before anything imports TensorFlow: see kernels/import_order.py
    lines = [f"ScaleLab {flavour} kernel: {gpu_banner()}"]
    lines.append(kernel_store(namespace))
    if flavour == "tensorflow":
        lines.append(tensorflow_banner(os.environ))
    if flavour == "pyspark":
        lines.append(_begin_spark(namespace))
    if envvars.GPU_DEADLINE in os.environ:
        at = time.strftime("%H:%M", time.localtime(float(os.environ[envvars.GPU_DEADLINE])))
        lines.append(f"GPU session ends at {at} (the server stops then; files are kept)")
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            _warn_before_cells(shell)
    _show_notices()
    print("\n".join(lines))
    _show_with_first_cell("\n".join(lines))


def _show_with_first_cell(banner: str) -> None:
    """Print ``banner`` in the first cell's output too (normal output, not stderr: it is no
    error): what a kernel prints while it starts has no cell to go to, so the notebook would
    never show it."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return

    def show(*_args: Any) -> None:
        shell.events.unregister("pre_run_cell", show)
        print(banner)

    shell.events.register("pre_run_cell", show)


def _show_notices() -> None:
    """Print the hub's notices to the student (an idle-GPU warning) before the next cell."""
    from IPython import get_ipython

    from scalelab.kernels import notices

    shell = get_ipython()
    if shell is not None:
        notices.install(shell)
