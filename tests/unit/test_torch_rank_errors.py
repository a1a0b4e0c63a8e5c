"""A crashed TorchDistributor rank explained: the rule (pure) on the texts Spark 4.3, pyspark's
TorchDistributor and torchrun (torch 2.13) really printed, captured on a standalone cluster of two
1-core workers (rank 1 raised ``ValueError`` after ``init_process_group``; rank 0 then lost its
peer in ``dist.barrier()``), and the parsing of torchrun's output (kernels/torch_ranks.py).
tests/integration/spark/test_torch_distributor.py provokes the same crash for real in a kernel."""

# ruff: noqa: E501 -- the captured texts keep their lines as printed
from __future__ import annotations

import subprocess
import sys

from scalelab.kernels import torch_ranks
from scalelab.kernels.spark_errors import (
    OUTPUT_BEGIN,
    OUTPUT_END,
    TASK_PLACE,
    explain,
    task_place_lines,
)

CLUSTER = {"spark.master": "spark://127.0.0.1:7077", "spark.driver.memory": "1g"}

# The cell's Py4JJavaError as describe() gives it (its Java frames cut after the first).
CRASH = (
    "Py4JJavaError Py4JError Exception BaseException object: An error occurred while calling o59.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed barrier ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(0, 1) finished unsuccessfully.\n"
    "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/pyspark/ml/torch/distributor.py", line 758, in wrapped_train_fn\n'
    "    LogStreamingClient._destroy()\n"
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/ml/torch/distributor.py", line 584, in _get_output_from_framework_wrapper\n'
    "    return framework_wrapper(\n"
    "           ^^^^^^^^^^^^^^^^^^\n"
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/ml/torch/distributor.py", line 932, in _run_training_on_pytorch_function\n'
    "    raise RuntimeError(\n"
    "RuntimeError: TorchDistributor failed during training.View stdout logs for detailed error message.\n"
    " SQLSTATE: 38000\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:1097)\n"
    ""
)
# Each barrier task's output as the driver's log server received it (connection by connection).
NODE_1 = (
    "rank 1 reached epoch 0",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/tmp/tmpq01jmq30/train.py", line 8, in <module>',
    "[rank1]:     output = fn(*args, **kwargs)",
    "[rank1]:              ^^^^^^^^^^^^^^^^^^^",
    '[rank1]:   File "/tmp/dist-exp/crash.py", line 13, in train',
    '[rank1]:     raise ValueError("expected a batch of 64 images, got 63")',
    "[rank1]: ValueError: expected a batch of 64 images, got 63",
    "E1204 10:16:15.976000 29019 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 29112) of binary: /srv/scalelab/.venv/bin/python",
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "<frozen runpy>", line 88, in _run_code',
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>',
    "    main()",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper',
    "    return f(*args, **kwargs)",
    "           ^^^^^^^^^^^^^^^^^^",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main',
    "    run(args)",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1019, in run',
    "    elastic_launch(",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 194, in __call__',
    "    return launch_agent(",
    "           ^^^^^^^^^^^^^",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent',
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "============================================================",
    "/tmp/tmpq01jmq30/train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-12-04_10:16:15",
    "  host      : localhost",
    "  rank      : 1 (local_rank: 0)",
    "  exitcode  : 1 (pid: 29112)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
)
NODE_0 = (
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/tmp/tmp2mm789vg/train.py", line 8, in <module>',
    "[rank0]:     output = fn(*args, **kwargs)",
    "[rank0]:              ^^^^^^^^^^^^^^^^^^^",
    '[rank0]:   File "/tmp/dist-exp/crash.py", line 14, in train',
    "[rank0]:     dist.barrier()",
    '[rank0]:   File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
    "[rank0]:     return func(*args, **kwargs)",
    "[rank0]:            ^^^^^^^^^^^^^^^^^^^^^",
    '[rank0]:   File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356, in barrier',
    "[rank0]:     work.wait()",
    "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:37778. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
    "E1204 10:16:17.383000 29022 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 29102) of binary: /srv/scalelab/.venv/bin/python",
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "<frozen runpy>", line 88, in _run_code',
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>',
    "    main()",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper',
    "    return f(*args, **kwargs)",
    "           ^^^^^^^^^^^^^^^^^^",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main',
    "    run(args)",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1019, in run',
    "    elastic_launch(",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 194, in __call__',
    "    return launch_agent(",
    "           ^^^^^^^^^^^^^",
    '  File "/srv/scalelab/.venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent',
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "============================================================",
    "/tmp/tmp2mm789vg/train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-12-04_10:16:17",
    "  host      : localhost",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : 1 (pid: 29102)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
)


def _with_context(executor: str = "1", host: str = "127.0.0.1") -> str:
    """CRASH with what the kernel's hook adds: the failed task's place and each task's output."""
    place = TASK_PLACE.format(partition=1, executor=executor, host=host)
    outputs = "".join(
        f"\n{OUTPUT_BEGIN}\n" + "\n".join(o) + f"\n{OUTPUT_END}" for o in (NODE_0, NODE_1)
    )
    return f"{CRASH}\n{place}{outputs}"


def test_the_failed_rank_is_named_with_its_executor_host_and_exception():
    explanation = explain(_with_context(), CLUSTER, {})
    assert explanation is not None
    assert explanation.title.startswith(
        "rank 1 of the TorchDistributor job failed in executor 1 on 127.0.0.1: "
        "ValueError: expected a batch of 64 images, got 63."
    )
    assert explanation.settings == ("the training function",)
    last = explanation.fix.split("last lines:", 1)[1]
    assert last.split("\n")[1].strip() == "rank 1 reached epoch 0"  # what it printed first
    assert 'raise ValueError("expected a batch of 64 images, got 63")' in last
    assert "[rank1]" not in last  # torch's prefix is taken off
    assert "Connection closed by peer" not in last  # rank 0's consequence is not the cause
    assert "num_processes=1, local_mode=True" in explanation.fix


def test_when_spark_names_the_rank_that_only_lost_its_peer_the_crashed_rank_is_explained():
    # Regression (fresh-clone run of stop 27): under load rank 0's "Connection closed by peer"
    # reached Spark before rank 1's own failure, and the cell blamed rank 0.
    # Regression (CI run of stop 39): the kernel's hook added the place of Spark's task only
    # (rank 0's), so rank 1 was named without its executor. It adds every task's place now, in
    # the shape the driver's REST API gives (torch_ranks.task_places).
    rest = {p: {"executor": str(p), "host": "127.0.0.1", "status": "FAILED"} for p in (1, 0)}
    places = "\n".join(task_place_lines(rest))
    assert places.split("\n")[0] == "[barrier task 0 ran in executor 0 on 127.0.0.1]"
    outputs = "".join(
        f"\n{OUTPUT_BEGIN}\n" + "\n".join(o) + f"\n{OUTPUT_END}" for o in (NODE_0, NODE_1)
    )
    text = CRASH.replace("ResultTask(0, 1)", "ResultTask(0, 0)") + f"\n{places}{outputs}"
    explanation = explain(text, CLUSTER, {})
    assert explanation.title.startswith(
        "rank 1 of the TorchDistributor job failed in executor 1 on 127.0.0.1: "
        "ValueError: expected a batch of 64 images, got 63."
    ), explanation.title
    assert "Connection closed by peer" not in explanation.fix


def test_a_rank_that_only_lost_its_peer_is_still_named_when_no_other_rank_says_more():
    assert torch_ranks.culprit([list(NODE_0)], 0) == 0  # rank 1 left no output: Spark's word stands
    assert torch_ranks.culprit([list(NODE_0), list(NODE_1)], 0) == 1
    assert torch_ranks.culprit([list(NODE_0), list(NODE_1)], 1) == 1
    assert torch_ranks.culprit([], None) is None


def test_without_the_ui_the_host_comes_from_torchruns_report():
    place = TASK_PLACE.format(partition=1, executor="1", host="127.0.0.1")
    explanation = explain(_with_context().replace(place, ""), CLUSTER, {})
    assert explanation.title.startswith(
        "rank 1 of the TorchDistributor job failed on localhost: ValueError: expected"
    )


def test_without_any_output_kept_the_rank_still_comes_from_sparks_failed_task():
    explanation = explain(CRASH, CLUSTER, {})
    assert explanation.title.startswith("rank 1 of the TorchDistributor job failed")
    assert "(no output kept)" in explanation.fix


def test_a_rank_killed_by_a_signal_says_so():
    killed = [line for line in NODE_1 if not line.startswith("[rank1]")]
    killed = [line.replace("exitcode  : 1 (pid", "exitcode  : -9 (pid") for line in killed]
    text = f"{CRASH}\n{OUTPUT_BEGIN}\n" + "\n".join(killed) + f"\n{OUTPUT_END}"
    explanation = explain(text, CLUSTER, {})
    assert "its process ended with exit code -9 (pid" in explanation.title
    assert "SIGKILL" in explanation.title


def test_torchruns_output_is_parsed():
    assert torch_ranks.rank_of(NODE_1) == 1 and torch_ranks.rank_of(NODE_0) == 0
    assert torch_ranks.rank_of(["hello"]) is None
    trace = torch_ranks.exception_lines(NODE_1, 1)
    assert trace[0] == "Traceback (most recent call last):"
    assert trace[-1] == "ValueError: expected a batch of 64 images, got 63"
    assert torch_ranks.exception_lines(NODE_1, 0) == []
    cause = torch_ranks.root_cause(NODE_0)
    assert (cause["host"], cause["rank"], cause["exitcode"]) == (
        "localhost", "0 (local_rank: 0)", "1 (pid: 29102)",
    )  # fmt: skip


def test_the_log_server_keeps_each_connections_lines_of_the_last_run():
    for line in ("old run",):
        torch_ranks.record((1000, 1), line)
    torch_ranks.record((2000, 2), "[rank0]: a")
    torch_ranks.record((2000, 3), "[rank1]: b")
    torch_ranks.record((2000, 2), "[rank0]: c")
    assert torch_ranks.last_run() == [["[rank0]: a", "[rank0]: c"], ["[rank1]: b"]]


#: In a fresh interpreter: the hook is put in place before pyspark.ml.torch is imported (as at a
#: kernel's start), then pyspark's own log server and client carry two lines of a "rank".
THROUGH_PYSPARKS_LOG_SERVER = """
import sys, time
import subprocess
import sys

from scalelab.kernels import torch_ranks
torch_ranks.install()
assert "pyspark.ml" not in sys.modules  # nothing imported at install
from pyspark.ml.torch.log_communication import LogStreamingClient, LogStreamingServer
server = LogStreamingServer()
server.start("127.0.0.1")
time.sleep(0.5)
client = LogStreamingClient("127.0.0.1", server.port)
client.send("[rank1]: Traceback (most recent call last):")
client.send("[rank1]: ValueError: boom")
client.close()
deadline = time.monotonic() + 10
while len(sum(torch_ranks.last_run(), [])) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
server.shutdown()
print(torch_ranks.last_run())
"""


def test_pyspark_log_servers_lines_are_kept_once_its_module_is_imported():
    out = subprocess.run(
        [sys.executable, "-c", THROUGH_PYSPARKS_LOG_SERVER],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == (
        "[['[rank1]: Traceback (most recent call last):', '[rank1]: ValueError: boom']]"
    )


#: In a fresh interpreter, as in a kernel: TorchDistributor's own logger, made by pyspark.
DISTRIBUTOR_LINES = """
from scalelab.kernels import torch_ranks
torch_ranks.install()
from pyspark.ml.torch.distributor import _get_logger
logger = _get_logger("TorchDistributor")  # level INFO, a stderr handler: pyspark's own set-up
logger.info("Started distributed training with 2 executor processes")
logger.warning("something to look at")
"""


def test_torch_distributors_info_lines_are_normal_output_and_its_warnings_stay_on_stderr():
    out = subprocess.run(
        [sys.executable, "-c", DISTRIBUTOR_LINES],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert out.stdout.splitlines() == ["Started distributed training with 2 executor processes"]
    assert "Started" not in out.stderr
    assert "something to look at" in out.stderr
