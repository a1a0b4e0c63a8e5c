"""Interrupting a cell stops its Spark jobs too: every task, TorchDistributor's ranks included.

:func:`install` registers a ``post_run_cell`` hook: after a cell that ended in
``KeyboardInterrupt``, every active job of the kernel's SparkContext is cancelled
(``cancelAllJobs``), from a thread of its own, so on a Py4J connection of its own.
Why: docs/design-notes.md, scalelab.kernels.spark_interrupt.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from scalelab.common.exc_chain import first_in_chain

#: Seconds to wait for Spark to take the cancellation before the cell's prompt comes back.
CANCEL_WAIT_S = 10.0


def cancel_all_jobs(wait_s: float = CANCEL_WAIT_S) -> bool:
    """Cancel every active job of this process's SparkContext, if there is one.

    Returns True when a SparkContext took the request within ``wait_s`` seconds; False with
    none, or when its driver does not answer (a line on stderr then says so).
    """
    try:
        from pyspark import SparkContext
    except ImportError:
        return False
    context = SparkContext._active_spark_context
    if context is None or getattr(context, "_jsc", None) is None:
        return False  # none, or one still starting (its start was interrupted): no jobs yet
    done = threading.Event()

    def cancel() -> None:
        try:
            context.cancelAllJobs()
            done.set()
        except Exception:  # noqa: BLE001 -- a dead driver: nothing left to cancel
            pass

    threading.Thread(target=cancel, name="scalelab-cancel-jobs", daemon=True).start()
    if not done.wait(wait_s):
        print(
            "ScaleLab: the Spark driver did not take the cancellation of the interrupted "
            "cell's jobs; restart the kernel if they still run (the Spark UI lists them).",
            file=sys.stderr,
        )
        return False
    return True


def interrupt_in(error: BaseException | None) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` in ``error``'s chain (itself, its ``__cause__`` or
    ``__context__``, and theirs), or None.

    An interrupt that comes while the main thread waits in a Py4J call makes py4j shut that
    connection down and raise the interrupt again; a ``finally`` of PySpark's on the way out
    (TorchDistributor's, a call-site reset) then calls the driver on the closed connection and
    raises ``Py4JNetworkError``, whose ``__context__`` is the interrupt. The student
    interrupted; the driver is fine.
    """
    return first_in_chain(error, KeyboardInterrupt)


def install(shell: Any) -> None:
    """Cancel the kernel's Spark jobs after each cell that ends in ``KeyboardInterrupt`` (or in
    an error raised while one was handled: :func:`interrupt_in`) (``shell``: the kernel's
    ``InteractiveShell``)."""

    def after(result: Any) -> None:
        if interrupt_in(getattr(result, "error_in_exec", None)) is not None:
            if cancel_all_jobs():
                print(
                    "ScaleLab: interrupted: the cell's Spark jobs were cancelled "
                    "(their tasks and any TorchDistributor ranks stop in a few seconds).",
                    file=sys.stderr,
                )

    shell.events.register("post_run_cell", after)
