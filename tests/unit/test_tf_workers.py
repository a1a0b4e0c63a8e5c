"""TFDistributor's pure parts: TF_CONFIG, a worker's environment, its failure message (issue 15)."""

from __future__ import annotations

import json

import pytest

from scalelab.kernels.spark_errors import explain
from scalelab.kernels.tf_distributor import (
    failure_message,
    parse_failure,
    tf_config,
    worker_environment,
)

ENDPOINTS = ["10.0.0.5:40001", "10.0.0.6:40002"]


def test_tf_config_names_every_worker_in_order_and_this_one():
    config = json.loads(tf_config(ENDPOINTS, 1))
    assert config == {
        "cluster": {"worker": ENDPOINTS},
        "task": {"type": "worker", "index": 1},
    }
    with pytest.raises(ValueError, match=r"worker index 2 outside 0\.\.1"):
        tf_config(ENDPOINTS, 2)


def test_a_cpu_worker_sees_no_gpu_and_one_thread_pool_per_task_cpu():
    env = worker_environment(
        {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", "PATH": "/bin", "TF_CONFIG": "{}"},
        threads=2,
    )
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert (env["TF_NUM_INTRAOP_THREADS"], env["TF_NUM_INTEROP_THREADS"]) == ("2", "2")
    assert "TF_CONFIG" not in env  # the worker's own, made once every worker holds its port
    assert env["PATH"] == "/bin"


def test_a_gpu_worker_gets_its_task_addresses_mapped_through_the_executors_devices():
    base = {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c", "TF_NUM_INTRAOP_THREADS": "8"}
    env = worker_environment(base, threads=1, gpu_addresses=["2"])
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-c"  # never a GPU the executor does not hold
    assert env["TF_NUM_INTRAOP_THREADS"] == "8"  # the student's own setting stays
    bare = worker_environment({}, threads=1, gpu_addresses=["1"])
    assert bare["CUDA_VISIBLE_DEVICES"] == "1"


LINES = [
    "epoch 0: loss 2.1",
    "Traceback (most recent call last):",
    '  File "/tmp/ipykernel_7/1.py", line 5, in train',
    "ValueError: expected a batch of 64 images, got 63",
]


def test_a_failure_reads_back_from_inside_the_java_error_text():
    message = failure_message(1, 2, "node-2", 1, LINES)
    java = (
        "Py4JJavaError: An error occurred while calling collectAndServe.\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        f"scalelab.kernels.tf_distributor.TFWorkerError: {message}\n"
        "\n\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException"
    )
    failure = parse_failure(java)
    assert failure == {
        "worker": 1,
        "workers": 2,
        "host": "node-2",
        "ended": "ended with exit code 1",
        "lines": LINES,
        "why": "ValueError: expected a batch of 64 images, got 63",
    }
    text = explain(java, {}, {}).text()
    assert text.startswith(
        "ScaleLab: worker 1 of 2 of the TFDistributor job failed on node-2: ValueError: "
        "expected a batch of 64 images, got 63."
    )
    assert "epoch 0: loss 2.1" in text and "TFDistributor(num_workers=1)" in text


def test_a_killed_worker_is_told_by_its_signal():
    message = failure_message(0, 4, "node-1", -9, [])
    assert message.startswith("TensorFlow worker 0 of 4 on node-1 was killed by signal 9;")
    assert "(it printed nothing)" in message
    assert parse_failure(message)["why"] == "was killed by signal 9"
    assert parse_failure("no such thing") is None
