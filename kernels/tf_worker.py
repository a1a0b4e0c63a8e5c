"""One worker of :class:`~scalelab.kernels.tf_distributor.TFDistributor`, in its own process.

``python -m scalelab.kernels.tf_worker JOB RESULT``: ``JOB`` holds the cloudpickled
``(train_fn, args, kwargs)``; the worker makes its ``tf.distribute.MultiWorkerMirroredStrategy``
from ``TF_CONFIG`` (set by its task), calls ``train_fn(strategy, *args, **kwargs)`` and, as
worker 0, writes the cloudpickled return value to ``RESULT``. A failure exits 1 after printing
its traceback, the training function's frames only (the task quotes the last lines).
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main(job: str, result: str) -> int:
    from pyspark import cloudpickle

    with open(job, "rb") as f:
        train_fn, args, kwargs = cloudpickle.loads(f.read())
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    try:
        value = train_fn(strategy, *args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 -- told by the exit code and the traceback
        # The student's frames only: this module's own frame is left out.
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)
        print("".join(lines), end="", file=sys.stderr, flush=True)
        return 1
    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
        with open(result, "wb") as f:
            f.write(cloudpickle.dumps(value))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
