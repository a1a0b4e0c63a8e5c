"""Spark failure explanations: the pattern matching (pure), on the texts Spark and its cluster
managers really print (Spark 4.3 here; YARN's and Kubernetes' texts copied from their logs, since
neither runs here)."""

from __future__ import annotations

import pytest

from scalelab.kernels.spark_errors import Explanation, describe, explain

LOCAL = {"spark.master": "local[2]", "spark.driver.memory": "1g"}
CLUSTER = {"spark.master": "spark://127.0.0.1:7077", "spark.driver.memory": "1g"}

# Seen with pyspark 4.3.0 on this machine (tests/test_spark_kernel.py provokes each for real).
JAVA_MISSING = (
    "SparkStartError RuntimeError Exception: Spark did not start\n"
    "PySparkRuntimeError PySparkException RuntimeError: [JAVA_GATEWAY_EXITED] Java gateway "
    "process exited before sending its port number."
)
MAX_RESULT = (
    "Py4JJavaError Py4JError Exception: An error occurred while calling o37.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Total size of "
    "serialized results of 1 tasks (2.5 MiB) is bigger than spark.driver.maxResultSize "
    "(1024.0 KiB)"
)
DRIVER_STOPPED_BY_OOM = (
    "Py4JJavaError Py4JError: An error occurred while calling o40.collectToPython.\n"
    ': java.lang.NullPointerException: Cannot invoke "org.apache.spark.scheduler.DAGScheduler'
    '.cleanupQueryJobs(long)" because the return value of "org.apache.spark.SparkContext'
    '.dagScheduler()" is null'
)
# The JVM exited while a call was in flight: py4j gets an empty answer and raises a bare
# Py4JError with no Java trace (seen when local mode's OutOfMemoryError kills the driver).
CALL_LOST = (
    "Py4JError Exception BaseException object: An error occurred while calling "
    "o45.collectToPython [__main__ pyspark.sql.dataframe py4j.java_gateway py4j.protocol]"
)
DRIVER_GONE = (
    "ConnectionRefusedError ConnectionError OSError: [Errno 111] Connection refused "
    "[__main__ py4j.java_gateway py4j.clientserver]"
)
PYTHON_WORKER = (
    "PythonException CapturedException PySparkException: An exception was thrown from the "
    "Python worker:\nTraceback (most recent call last):\n ...\nMemoryError"
)
TOO_LITTLE_DRIVER_MEMORY = (
    "Py4JJavaError: org.apache.spark.SparkIllegalArgumentException: "
    "[INVALID_DRIVER_MEMORY.SYSTEM_MEMORY] Insufficient driver memory: System memory 209715200 "
    "must be at least 471859200."
)
# YARN's NodeManager, as Spark reports it (not runnable here).
YARN_OVERHEAD = (
    "Py4JJavaError: org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in "
    "stage 1.0 failed 4 times: ExecutorLostFailure (executor 2 exited caused by one of the "
    "running tasks) Reason: Container killed by YARN for exceeding physical memory limits. "
    "4.5 GB of 4.5 GB physical memory used. Consider boosting spark.executor.memoryOverhead."
)
# Kubernetes (not runnable here).
K8S_OOMKILLED = (
    "Py4JJavaError: ExecutorLostFailure (executor 1 exited caused by one of the running tasks) "
    "Reason: The executor with id 1 exited with exit code 137(SIGKILL, possible container OOM)."
)
OFF_HEAP = (
    "Py4JJavaError: org.apache.spark.memory.SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] "
    "Unable to acquire 65536 bytes of memory, got 0."
)
DIRECT_BUFFER = "Py4JJavaError: java.lang.OutOfMemoryError: Direct buffer memory"
EXECUTOR_HEAP = (
    "Py4JJavaError: Job aborted due to stage failure: Task 0 in stage 2.0 failed 4 times, most "
    "recent failure: Lost task 0.3 in stage 2.0 (executor 1): java.lang.OutOfMemoryError: Java "
    "heap space"
)


@pytest.mark.parametrize(
    ("text", "conf", "setting"),
    [
        (JAVA_MISSING, LOCAL, "JAVA_HOME"),
        (MAX_RESULT, LOCAL, "spark.driver.maxResultSize"),
        (DRIVER_STOPPED_BY_OOM, LOCAL, "spark.driver.memory"),
        (DRIVER_GONE, LOCAL, "spark.driver.memory"),
        (CALL_LOST, LOCAL, "spark.driver.memory"),
        (
            "Py4JError: whatever py4j said\n[driver JVM exited with code -9]",
            LOCAL,
            "spark.driver.memory",
        ),
        (PYTHON_WORKER, LOCAL, "spark.executor.pyspark.memory"),
        (TOO_LITTLE_DRIVER_MEMORY, LOCAL, "spark.driver.memory"),
        (YARN_OVERHEAD, CLUSTER, "spark.executor.memoryOverhead"),
        (K8S_OOMKILLED, CLUSTER, "spark.executor.memoryOverhead"),
        (
            OFF_HEAP,
            {**CLUSTER, "spark.memory.offHeap.enabled": "true"},
            "spark.memory.offHeap.size",
        ),
        (OFF_HEAP, LOCAL, "spark.driver.memory"),  # execution memory on the heap
        (DIRECT_BUFFER, CLUSTER, "spark.memory.offHeap.size"),
        (EXECUTOR_HEAP, CLUSTER, "spark.executor.memory"),
        (EXECUTOR_HEAP, LOCAL, "spark.driver.memory"),
    ],
)
def test_each_failure_names_its_setting(text: str, conf: dict, setting: str):
    explanation = explain(text, conf, {"JAVA_HOME": "/nowhere"})
    assert isinstance(explanation, Explanation)
    assert setting in explanation.settings
    assert setting in explanation.text()


def test_first_setting_is_the_one_to_change():
    assert explain(MAX_RESULT, LOCAL, {}).settings[0] == "spark.driver.maxResultSize"
    assert explain(K8S_OOMKILLED, CLUSTER, {}).settings[0] == "spark.executor.memoryOverhead"


def test_driver_exit_status_names_an_out_of_memory_exit():
    oom = explain(CALL_LOST + "\n[driver JVM exited with code 52]", LOCAL, {})
    assert "OutOfMemoryError (exit code 52)" in oom.title
    killed = explain(CALL_LOST + "\n[driver JVM exited with code -9]", LOCAL, {})
    assert "(exit code -9)" in killed.title and "OutOfMemoryError" not in killed.title
    # A heap error that the JVM still reported is the heap rule's, exit status or not.
    heap = explain(EXECUTOR_HEAP + "\n[driver JVM exited with code 52]", LOCAL, {})
    assert "ran out of Java heap memory" in heap.title


def test_a_py4j_error_with_a_java_trace_is_not_a_lost_call():
    text = (
        "Py4JError Exception: An error occurred while calling o12.nosuch. Trace:\n"
        "py4j.Py4JException: Method nosuch([]) does not exist [__main__ py4j.protocol]"
    )
    assert explain(text, LOCAL, {}) is None


def test_current_values_are_in_the_fix():
    conf = {**LOCAL, "spark.driver.memory": "2g", "spark.driver.maxResultSize": "1m"}
    assert "now 2g" in explain(DRIVER_GONE, conf, {}).fix
    assert "(1m)" in explain(MAX_RESULT, conf, {}).title
    assert "JAVA_HOME=/opt/none" in explain(JAVA_MISSING, LOCAL, {"JAVA_HOME": "/opt/none"}).title
    assert "JAVA_HOME is not set" in explain(JAVA_MISSING, LOCAL, {}).title


@pytest.mark.parametrize(
    "text",
    [
        "NameError Exception: name 'sparkk' is not defined",
        "ZeroDivisionError ArithmeticError: division by zero",
        "ConnectionRefusedError OSError: [Errno 111] Connection refused [__main__ requests.api]",
        "AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] The table or view `songs` cannot be found.",
    ],
)
def test_other_errors_are_left_alone(text: str):
    assert explain(text, LOCAL, {}) is None


def test_describe_follows_causes_and_traceback_modules():
    try:
        try:
            raise RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited")
        except RuntimeError as inner:
            raise ValueError("Spark did not start") from inner
    except ValueError as exc:
        text = describe(exc)
    assert "ValueError" in text and "JAVA_GATEWAY_EXITED" in text
    assert __name__ in text
    assert explain(text, LOCAL, {}).settings[0] == "JAVA_HOME"


def test_describe_survives_an_exception_whose_text_needs_the_dead_jvm():
    class JavaError(Exception):  # like Py4JJavaError, whose __str__ asks the driver JVM
        def __str__(self) -> str:
            raise ConnectionRefusedError(111, "Connection refused")

    try:
        try:
            raise JavaError("An error occurred while calling o40.collectToPython.\n")
        except JavaError:
            raise ConnectionRefusedError(111, "Connection refused")  # noqa: B904
    except ConnectionRefusedError as exc:
        text = describe(exc)
    assert "JavaError" in text and "An error occurred while calling o40.collectToPython" in text


# What PySpark 4.3 raises when a stopped session is used (tests/test_spark_kernel.py does it).
USED_AFTER_STOP = (
    "AttributeError Exception BaseException object: 'NoneType' object has no attribute 'sc' "
    "[__main__ pyspark.sql.session pyspark.sql.classic.dataframe]"
)


def test_a_session_used_after_stop_is_explained_as_stopped_not_as_a_dead_driver():
    explanation = explain(USED_AFTER_STOP, LOCAL, {})
    assert explanation is not None and explanation.settings == ("spark",)
    assert explanation.title.startswith("`spark` was stopped")
    assert "ScaleLab starts a new `spark`" in explanation.fix
    # The same AttributeError outside PySpark is not Spark's.
    assert (
        explain("AttributeError: 'NoneType' object has no attribute 'sc' [__main__]", LOCAL, {})
        is None
    )


def test_java_frames_are_folded_and_exception_lines_kept():
    from scalelab.kernels.spark_errors import fold_java_frames

    frames = [f"\tat org.apache.spark.Thing.method{i}(Thing.scala:{i})" for i in range(30)]
    cause = [f"\tat java.base/java.lang.Thread.run{i}(Thread.java:{i})" for i in range(3)]
    text = "\n".join(
        [
            "Py4JJavaError: An error occurred while calling o37.collectToPython.",
            ": org.apache.spark.SparkException: Job aborted due to stage failure",
            *frames,
            "Caused by: java.lang.OutOfMemoryError: Java heap space",
            *cause,
            "\t... 12 more",
        ]
    )
    folded = fold_java_frames(text, keep=5).splitlines()
    assert folded[:2] == text.splitlines()[:2]
    assert folded[2:7] == frames[:5]
    assert folded[7] == "\t... 25 more Java frames left out (the driver's log has them)"
    assert folded[8] == "Caused by: java.lang.OutOfMemoryError: Java heap space"
    assert folded[9:12] == cause and folded[12] == "\t... 12 more"
    coloured = "\x1b[0;31m\tat a.b.C.d(C.java:1)\x1b[0m"
    assert fold_java_frames("\n".join([coloured] * 7), keep=5).count("\n") == 5
    assert (
        fold_java_frames("plain Python\n  File 'x.py', line 1")
        == "plain Python\n  File 'x.py', line 1"
    )
