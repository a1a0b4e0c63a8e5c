"""Data-parallel TensorFlow on a real Spark standalone cluster, from the PySpark kernel (issue 15).

:class:`~scalelab.kernels.tf_distributor.TFDistributor` runs 2 workers
(``tf.distribute.MultiWorkerMirroredStrategy``, gRPC ring all-reduce on CPUs) in barrier tasks
of two 1-core workers (``tests/support/sparkcluster.py``), on real Fashion-MNIST images from the
student's store: the gradients are all-reduced (both workers end with the same weights), the
model learns, worker 0's value comes back, a second run in the same notebook works (each worker
is a fresh process), and a worker that fails is named with its host and last lines.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import psutil
import pytest
from pyspark import cloudpickle

from scalelab.kernels.tf_distributor import PORT_LINE, start_worker, worker_environment
from tests.integration.spark.test_torch_distributor import _cluster_kernel_env
from tests.support.kernelrun import Kernel

#: 4096 training and 1000 test images of the course store's Fashion-MNIST shards.
DATA = """
import numpy as np, pyarrow.parquet as pq
def images(split, n):
    table = pq.read_table(f"datasets/fashion-mnist/parquet/{split}", filesystem=store).slice(0, n)
    x = np.frombuffer(b"".join(table.column("image").to_pylist()), np.uint8).reshape(-1, 28, 28, 1)
    return (x / 255.0).astype("float32"), np.asarray(table.column("label").to_pylist(), "int64")
x_train, y_train = images("train", 4096)
x_test, y_test = images("test", 1000)
x_train.shape, x_test.shape
"""

#: A student's training function: a custom loop (Keras 3's fit does not run under
#: MultiWorkerMirroredStrategy), each worker its half of every global batch (tf.data's auto
#: sharding); worker 0 returns the test accuracy, the workers' weight sums (gathered) and how
#: many replicas were in sync.
TRAIN = """
from scalelab.kernels.tf_distributor import TFDistributor

def train(strategy, x, y, x_test, y_test, epochs):
    import keras
    import tensorflow as tf
    batch = 256
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ])
        optimizer = keras.optimizers.Adam(1e-3)
        loss_of = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0)
    data = strategy.experimental_distribute_dataset(data.batch(batch, drop_remainder=True))

    @tf.function
    def step(xb, yb):
        def replica(xb, yb):
            with tf.GradientTape() as tape:
                per_sample = loss_of(yb, model(xb, training=True))
                loss = tf.nn.compute_average_loss(per_sample, global_batch_size=batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(replica, args=(xb, yb)), axis=None)

    losses = []
    for _ in range(epochs):
        total = [float(step(xb, yb)) for xb, yb in data]
        losses.append(sum(total) / len(total))
    weights = tf.constant(float(sum(float(w.numpy().sum()) for w in model.trainable_variables)))
    sums = strategy.gather(strategy.run(lambda: tf.reshape(weights, [1])), axis=0)
    accuracy = float((model.predict(x_test, verbose=0).argmax(1) == y_test).mean())
    return {"replicas": strategy.num_replicas_in_sync, "losses": losses,
            "weight_sums": sums.numpy().tolist(), "accuracy": accuracy}
"""

CHECK = """
first = TFDistributor(num_workers=2).run(train, x_train, y_train, x_test, y_test, 3)
again = TFDistributor(num_workers=2).run(train, x_train, y_train, x_test, y_test, 1)
import json
print(json.dumps({"first": first, "again": again}))
"""

#: Worker 1 fails after the strategy is up.
CRASH = """
from scalelab.kernels.tf_distributor import TFDistributor

def train(strategy):
    import json, os
    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
        print("worker 1 read its first batch")
        raise ValueError("expected a batch of 64 images, got 63")
    return "worker 0 done"

TFDistributor(num_workers=2).run(train)
"""


def _tf_workers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "scalelab.kernels.tf_worker" in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def _tf_workers_after(timeout_s: float = 30) -> list[psutil.Process]:
    """The TF worker processes still running ``timeout_s`` after the job ended (none, once
    Spark has killed the failed stage's other task: on a loaded host that takes seconds)."""
    deadline = time.monotonic() + timeout_s
    while (left := _tf_workers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_two_workers_all_reduce_learn_and_run_again_in_the_same_notebook(
    kernel_environment: dict[str, str], two_workers: str, tmp_path: Path
):
    env = _cluster_kernel_env(kernel_environment, two_workers, tmp_path / "logs")
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        data = kernel.run(DATA, timeout_s=300)
        assert data["error"] is None, data
        assert data["result"] == "((4096, 28, 28, 1), (1000, 28, 28, 1))"
        assert kernel.run(TRAIN)["error"] is None
        out = kernel.run(CHECK, timeout_s=600)
    assert out["error"] is None, out["stderr"][-4000:]  # the workers' own last lines, whole
    result = json.loads(out["stdout"].strip().splitlines()[-1])
    first, again = result["first"], result["again"]
    assert first["replicas"] == again["replicas"] == 2  # two workers, one replica each
    a, b = first["weight_sums"]
    assert a == pytest.approx(b, rel=1e-6)  # all-reduced: the same weights on both workers
    assert first["losses"][-1] < first["losses"][0]  # it learns
    assert first["accuracy"] > 0.6  # real images, 3 epochs of 4096: far above chance (0.1)
    assert len(again["losses"]) == 1  # a second run in the same kernel works
    assert not _tf_workers_after()  # every worker process ended with its task


def test_a_worker_that_fails_is_named_with_its_host_and_last_lines(
    kernel_environment: dict[str, str], two_workers: str, tmp_path: Path
):
    env = _cluster_kernel_env(kernel_environment, two_workers, tmp_path / "logs")
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run(CRASH, timeout_s=300)
    assert out["error"] is not None, out
    explanation = out["stderr"].split("ScaleLab: ", 1)[-1]
    assert explanation.startswith(
        "worker 1 of 2 of the TFDistributor job failed on 127.0.0.1: "
        "ValueError: expected a batch of 64 images, got 63."
    ), out["stderr"]
    last = explanation.split("last lines:", 1)[1]
    assert "worker 1 read its first batch" in last
    assert "Traceback (most recent call last):" in last
    assert "Setting to change: the training function" in explanation
    assert not _tf_workers_after()


def test_a_worker_holds_its_port_until_its_grpc_server_takes_it(tmp_path: Path):
    """The port a worker announces is bound by the worker until TF_CONFIG arrives, so no other
    process can take it in between (on a busy host TensorFlow's import takes seconds, and a port
    freed before it can end a run in "Could not start gRPC server"); one worker then trains."""
    job, result = tmp_path / "job.pkl", tmp_path / "result.pkl"
    job.write_bytes(
        cloudpickle.dumps((lambda strategy, n: n * strategy.num_replicas_in_sync, (21,), {}))
    )
    env = worker_environment(dict(os.environ), threads=1)
    with start_worker(str(job), str(result), "127.0.0.1", 0, env) as worker:
        assert worker.stdin is not None and worker.stdout is not None
        announced = next(line for line in worker.stdout if line.startswith(PORT_LINE))
        port = int(announced[len(PORT_LINE) :])
        with socket.socket() as other, pytest.raises(OSError, match="Address already in use"):
            other.bind(("127.0.0.1", port))
        worker.stdin.write(json.dumps([f"127.0.0.1:{port}"]) + "\n")
        worker.stdin.close()
        rest = worker.stdout.read()
        assert worker.wait(timeout=300) == 0, rest
    assert cloudpickle.loads(result.read_bytes()) == 21
