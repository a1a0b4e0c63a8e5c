"""Data-parallel TensorFlow on the Spark cluster: MultiWorkerMirroredStrategy in barrier tasks.

:class:`TFDistributor`, the TensorFlow counterpart of pyspark's ``TorchDistributor``, runs a
training function in ``num_workers`` fresh Python processes, one per barrier task, with
``TF_CONFIG`` naming every worker; worker 0's return value comes back. The function must use a
custom training loop. Why: docs/design-notes.md, scalelab.kernels.tf_distributor.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

#: Lines of a worker's output kept to explain its failure.
LINES_KEPT = 40

#: What a worker prints, followed by a port number, once it holds that port (bound, not yet
#: listening) on its task's host. Its task gathers every worker's ``host:port`` (a barrier) and
#: writes them to the worker's stdin as one JSON line; the worker makes ``TF_CONFIG`` of them,
#: lets the port go and starts its gRPC server on it at once. A port freed before TensorFlow's
#: import (seconds on a busy host) could be taken by another process meanwhile: then TensorFlow
#: fails with "Could not start gRPC server".
PORT_LINE = "scalelab-tf-port "


class TFWorkerError(RuntimeError):
    """A worker process ended with a non-zero exit code; the message names the worker, its
    host, the exit code and its last lines."""


def tf_config(endpoints: Sequence[str], index: int) -> str:
    """``TF_CONFIG`` for worker ``index`` of the cluster ``endpoints`` (``host:port`` each, in
    worker order), as TensorFlow's ``TFConfigClusterResolver`` reads it (pure)."""
    if not 0 <= index < len(endpoints):
        raise ValueError(f"worker index {index} outside 0..{len(endpoints) - 1}")
    return json.dumps(
        {"cluster": {"worker": list(endpoints)}, "task": {"type": "worker", "index": index}}
    )


def worker_environment(
    base: Mapping[str, str],
    *,
    threads: int,
    gpu_addresses: Sequence[str] = (),
) -> dict[str, str]:
    """The environment a worker starts with (pure); its ``TF_CONFIG`` comes later, on its
    stdin, once every worker holds its port (:data:`PORT_LINE`).

    ``CUDA_VISIBLE_DEVICES``: the task's GPU addresses (indices into the executor's own
    ``CUDA_VISIBLE_DEVICES`` where it has one, as Spark's discovery scripts give them), else
    empty (no GPU); TensorFlow's intra- and inter-op thread pools sized to the task's CPUs
    (``spark.task.cpus``), unless ``base`` sets them.
    """
    env = dict(base)
    env.pop("TF_CONFIG", None)
    visible = [d for d in base.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if gpu_addresses:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(
            visible[int(a)] if visible and int(a) < len(visible) else a for a in gpu_addresses
        )
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("TF_NUM_INTRAOP_THREADS", str(threads))
    env.setdefault("TF_NUM_INTEROP_THREADS", str(threads))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def failure_message(index: int, workers: int, host: str, code: int, lines: Sequence[str]) -> str:
    """What the notebook is told when worker ``index`` ended with exit ``code`` (pure)."""
    how = f"was killed by signal {-code}" if code < 0 else f"ended with exit code {code}"
    tail = "\n".join(f"  {line}" for line in lines) or "  (it printed nothing)"
    return f"TensorFlow worker {index} of {workers} on {host} {how}; its last lines:\n{tail}"


#: :func:`failure_message` as it reads inside the error that reaches the notebook: the worker,
#: the number of workers, the host, what ended it, and the indented last lines.
FAILURE = re.compile(
    r"TensorFlow worker (\d+) of (\d+) on (\S+) (ended with exit code -?\d+|was killed by "
    r"signal \d+); its last lines:\n((?:  .*(?:\n|$))*)"
)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*")


def parse_failure(text: str) -> dict[str, Any] | None:
    """The worker failure that :func:`failure_message` wrote into ``text`` (an error's text),
    or None: ``worker``, ``workers``, ``host``, ``ended`` (what ended it), ``lines`` (its last
    lines) and ``why`` (the last exception line among them, else ``ended``) (pure)."""
    match = FAILURE.search(text)
    if match is None:
        return None
    lines = [line[2:] for line in match.group(5).splitlines() if line.startswith("  ")]
    why = next((x for x in reversed(lines) if _EXCEPTION_LINE.match(x)), match.group(4))
    return {
        "worker": int(match.group(1)),
        "workers": int(match.group(2)),
        "host": match.group(3),
        "ended": match.group(4),
        "lines": lines,
        "why": why.strip(),
    }


def start_worker(
    job: str, result: str, host: str, index: int, env: Mapping[str, str], **popen: Any
) -> subprocess.Popen:
    """Start worker ``index`` (``python -m scalelab.kernels.tf_worker``) on ``host``: its stdin
    takes the endpoints (:data:`PORT_LINE`), its stdout and stderr come as one text stream;
    ``popen`` goes to :class:`subprocess.Popen` (the task's parent-death signal)."""
    argv = [sys.executable, "-m", "scalelab.kernels.tf_worker", job, result, host, str(index)]
    return subprocess.Popen(
        argv,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def _run_task(payload: bytes, workers: int, threads: int, use_gpu: bool) -> Iterator[Any]:
    """One barrier task: start worker ``partitionId`` as a child, hand it every worker's
    endpoint once all hold their ports, and wait for it."""
    from pyspark import BarrierTaskContext

    from scalelab.common.pdeathsig import set_parent_death_signal

    context = BarrierTaskContext.get()
    index = context.partitionId()
    host = context.getTaskInfos()[index].address.rsplit(":", 1)[0]
    gpus = list(context.resources()["gpu"].addresses) if use_gpu else []
    env = worker_environment(os.environ, threads=threads, gpu_addresses=gpus)
    with tempfile.TemporaryDirectory(prefix="scalelab-tf-") as folder:
        job, result = os.path.join(folder, "job.pkl"), os.path.join(folder, "result.pkl")
        with open(job, "wb") as f:
            f.write(payload)
        last: collections.deque[str] = collections.deque(maxlen=LINES_KEPT)
        with start_worker(
            job, result, host, index, env, preexec_fn=set_parent_death_signal
        ) as child:
            assert child.stdin is not None and child.stdout is not None
            for line in child.stdout:
                line = line.rstrip("\n")
                if line.startswith(PORT_LINE) and not child.stdin.closed:
                    endpoints = context.allGather(f"{host}:{line[len(PORT_LINE) :]}")
                    child.stdin.write(json.dumps(endpoints) + "\n")
                    child.stdin.close()
                    continue
                last.append(line)
                print(f"[worker {index}] {line}", file=sys.stderr, flush=True)
            code = child.wait()
        if code != 0:
            raise TFWorkerError(failure_message(index, workers, host, code, list(last)))
        if index == 0:
            with open(result, "rb") as f:
                yield f.read()
        else:
            yield None


class TFDistributor:
    """Run a TensorFlow training function data-parallel on ``num_workers`` Spark task slots.

    Parameters
    ----------
    num_workers
        Workers (barrier tasks, one process each); the cluster must offer that many task slots
        at once (cores / ``spark.task.cpus``), else Spark's barrier check fails.
    use_gpu
        Give each worker the GPUs Spark scheduled to its task (``spark.task.resource.gpu.amount``
        must be set); else each worker sees no GPU.
    spark
        The session to run on; default: the active one (the kernel's ``spark``).

    Raises
    ------
    ValueError
        ``num_workers`` < 1.
    """

    def __init__(self, num_workers: int = 2, *, use_gpu: bool = False, spark: Any = None):
        if num_workers < 1:
            raise ValueError(f"num_workers must be at least 1, not {num_workers}")
        self.num_workers = num_workers
        self.use_gpu = use_gpu
        self._spark = spark

    def run(self, train_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``train_fn(strategy, *args, **kwargs)`` in every worker; returns worker 0's
        value (it must pickle), the others' are dropped.

        ``strategy`` is the worker's ``tf.distribute.MultiWorkerMirroredStrategy``, made before
        ``train_fn`` runs (TensorFlow wants it at program start). ``train_fn`` and its arguments
        are pickled with cloudpickle (a function defined in the notebook goes by value).

        Raises
        ------
        pyspark.errors.exceptions.captured.PythonException or py4j's Py4JJavaError
            A worker failed (its :class:`TFWorkerError` message inside: which worker, on which
            host, its exit code and last lines), or the barrier stage could not be scheduled.
        """
        from pyspark import cloudpickle
        from pyspark.sql import SparkSession

        spark = self._spark or SparkSession.active()
        sc = spark.sparkContext
        payload = cloudpickle.dumps((train_fn, args, kwargs))
        workers, use_gpu = self.num_workers, self.use_gpu
        threads = int(sc.getConf().get("spark.task.cpus", "1"))
        sc.setJobDescription(f"TFDistributor: {workers} worker(s)")
        try:
            rdd = sc.parallelize(range(workers), workers).barrier()
            out = rdd.mapPartitions(lambda _: _run_task(payload, workers, threads, use_gpu))
            results = out.collect()
        finally:
            sc.setJobDescription(None)
        return cloudpickle.loads(results[0])
