"""One worker of :class:`~scalelab.kernels.tf_distributor.TFDistributor`, in its own process.

``python -m scalelab.kernels.tf_worker JOB RESULT HOST INDEX``: ``JOB`` holds the cloudpickled
``(train_fn, args, kwargs)``. Once TensorFlow is imported the worker holds a port on ``HOST``,
prints it (:data:`~scalelab.kernels.tf_distributor.PORT_LINE`) and reads every worker's
``host:port`` from stdin (one JSON line, from its task); it then makes ``TF_CONFIG``, lets the port
go and makes its ``tf.distribute.MultiWorkerMirroredStrategy``, whose gRPC server binds it,
calls ``train_fn(strategy, *args, **kwargs)`` and, as worker ``INDEX`` 0, writes the
cloudpickled return value to ``RESULT``. A failure exits 1 after printing its traceback, the
training function's frames only (the task quotes the last lines).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback

from scalelab.kernels.tf_distributor import PORT_LINE, tf_config


def main(job: str, result: str, host: str, index: int) -> int:
    from pyspark import cloudpickle

    with open(job, "rb") as f:
        train_fn, args, kwargs = cloudpickle.loads(f.read())
    import tensorflow as tf

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind((host, 0))  # no other bind gets this port while it is held
        print(f"{PORT_LINE}{held.getsockname()[1]}", flush=True)
        answer = sys.stdin.readline()
        if not answer:
            print("the task gave no endpoints (its barrier failed)", file=sys.stderr, flush=True)
            return 1
        os.environ["TF_CONFIG"] = tf_config(json.loads(answer), index)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # its gRPC server binds the port now
    try:
        value = train_fn(strategy, *args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 -- told by the exit code and the traceback
        # The student's frames only: this module's own frame is left out.
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)
        print("".join(lines), end="", file=sys.stderr, flush=True)
        return 1
    if index == 0:
        with open(result, "wb") as f:
            f.write(cloudpickle.dumps(value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
