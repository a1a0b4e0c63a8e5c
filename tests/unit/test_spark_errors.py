"""Spark failure explanations: the pattern matching (pure), on the texts Spark and its cluster
managers really print (Spark 4.3 here; YARN's captured on the test cluster's YARN; Kubernetes'
copied from its logs, since it does not run here)."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError

from scalelab.kernels.spark_errors import (
    Explanation,
    describe,
    explain,
    printable,
    suggested_overhead,
)

LOCAL = {"spark.master": "local[2]", "spark.driver.memory": "1g"}
CLUSTER = {"spark.master": "spark://127.0.0.1:7077", "spark.driver.memory": "1g"}

# Seen with pyspark 4.3.0 on this machine (tests/integration/spark/test_spark_kernel.py provokes
# each for real).
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
# YARN's NodeManager killing an executor's container, as Spark 4.3 reports it in the cell: captured
# from tests/integration/hadoop/test_spark_yarn.py on the test cluster's YARN (a Python worker
# holding 1.4 GiB in an
# executor of spark.executor.memory=512m, a container of 896 MB, spark.task.maxFailures=1).
YARN_OVERHEAD = (
    "Py4JJavaError Py4JError Exception: An error occurred while calling "
    "z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 "
    "failed 1 times, most recent failure: Lost task 0.0 in stage 0.0 (TID 0) (localhost executor "
    "1): ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason: "
    "Container killed by YARN for exceeding physical memory limits. 1.5 GB of 896 MB physical "
    "memory used. Consider boosting spark.executor.memoryOverhead."
)
# The NodeManager's own line for it (its log), which names the limit Hadoop's way.
YARN_NODEMANAGER = (
    "Container [pid=6059,containerID=container_1796343182646_0001_01_000002] is running "
    "663175168B beyond the 'PHYSICAL' memory limit. Current usage: 1.5 GB of 896 MB physical "
    "memory used; 4.5 GB of 1.8 GB virtual memory used. Killing container."
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


YARN = {"spark.master": "yarn", "spark.driver.memory": "1g", "spark.executor.memory": "512m"}


@pytest.mark.parametrize("text", [YARN_OVERHEAD, YARN_NODEMANAGER])
def test_an_executor_killed_by_yarn_for_memory_names_the_executors_settings_not_the_drivers(
    text: str,
):
    explanation = explain(text, YARN, {})
    assert explanation.settings == (
        "spark.executor.memoryOverhead",
        "spark.memory.offHeap.size",
        "spark.executor.memory",
    )
    assert "the executor, not the driver" in explanation.title
    assert "(1.5 GB used of its 896 MB)" in explanation.title
    assert "now 512m" in explanation.fix  # spark.executor.memory, the session's value
    assert "off-heap memory is off" in explanation.fix
    on = explain(text, {**YARN, "spark.memory.offHeap.enabled": "true",
                        "spark.memory.offHeap.size": "1g"}, {})  # fmt: skip
    assert "spark.memory.offHeap.size=1g) and the container must hold it too" in on.fix
    # The driver's own heap failure stays the driver's.
    assert explain(EXECUTOR_HEAP, LOCAL, {}).settings == ("spark.driver.memory",)


def test_the_overhead_suggested_is_larger_than_the_one_that_was_too_small():
    """Regression: a rank's container killed with 2560m of overhead was told "e.g. to 1g or
    2g"."""
    killed = explain(YARN_OVERHEAD, {**YARN, "spark.executor.memoryOverhead": "2560m"}, {})
    assert "(now 2560m), e.g. to 5g," in killed.fix
    assert ".config('spark.executor.memoryOverhead', '5g')" in killed.fix
    assert "e.g. to 1g," in explain(YARN_OVERHEAD, YARN, {}).fix  # unset: Spark's default
    assert [
        suggested_overhead(v) for v in ("384", "384m", "768M", "1g", "1536m", "2G", "x", "")
    ] == ["1g", "1g", "1536m", "2g", "3g", "4g", "1g", "1g"]


def test_a_yarn_master_without_the_clusters_configuration_names_hadoop_conf_dir():
    text = (
        "SparkStartError RuntimeError Exception: Spark did not start: spark.master is yarn, but "
        "neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set, so Spark cannot find the "
        "ResourceManager"
    )
    explanation = explain(text, YARN, {"JAVA_HOME": "/usr/lib/jvm/x"})
    assert explanation.settings == ("HADOOP_CONF_DIR", "YARN_CONF_DIR")
    assert "c.ScaleLabSpawner.hadoop_conf_dir" in explanation.fix
    elsewhere = explain(text.replace("neither", "no yarn-site.xml in HADOOP_CONF_DIR=/etc"),
                        YARN, {"HADOOP_CONF_DIR": "/etc"})  # fmt: skip
    assert "no yarn-site.xml in HADOOP_CONF_DIR=/etc" in elsewhere.title


def test_first_setting_is_the_one_to_change():
    assert explain(MAX_RESULT, LOCAL, {}).settings[0] == "spark.driver.maxResultSize"
    assert explain(K8S_OOMKILLED, CLUSTER, {}).settings[0] == "spark.executor.memoryOverhead"


def test_driver_exit_status_names_an_out_of_memory_exit():
    oom = explain(CALL_LOST + "\n[driver JVM exited with code 52]", LOCAL, {})
    assert "OutOfMemoryError (exit code 52)" in oom.title
    killed = explain(CALL_LOST + "\n[driver JVM exited with code -9]", LOCAL, {})
    assert "(exit code -9)" in killed.title and "OutOfMemoryError" not in killed.title
    # Regression (issue 34, Must 6): the same cell gave "ran out of Java heap memory" or "the
    # JVM is gone" by the race between the Java error's text and the JVM's end. A driver that
    # ended itself after an OutOfMemoryError gets one explanation, whichever the cell saw.
    heap = explain(EXECUTOR_HEAP + "\n[driver JVM exited with code 52]", LOCAL, {})
    assert heap.title == oom.title and heap.fix == oom.fix
    assert "ran out of Java heap memory" in explain(EXECUTOR_HEAP, LOCAL, {}).title  # JVM alive


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


# What PySpark 4.3 raises when a stopped session is used
# (tests/integration/spark/test_spark_kernel.py does it).
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


class _DeadDriverError(Exception):
    """Like py4j's Py4JJavaError after the driver died: ``__str__`` asks the JVM, and fails."""

    def __init__(self, errmsg: str):
        super().__init__(errmsg, "JavaObject id=o46")
        self.errmsg = errmsg

    def __str__(self) -> str:
        raise ConnectionRefusedError(111, "Connection refused")


def test_an_exception_whose_text_a_dead_driver_held_is_shown_by_its_message():
    try:
        try:
            raise ValueError("the cause")
        except ValueError as cause:
            raise _DeadDriverError(
                "An error occurred while calling o45.collectToPython.\n"
            ) from cause
    except _DeadDriverError as exc:
        error = exc
    shown = printable(error)
    assert str(shown) == (
        "An error occurred while calling o45.collectToPython. "
        "(the Java exception's text went with the driver JVM)"
    )
    assert shown.__cause__ is error.__cause__ and shown.__traceback__ is error.__traceback__
    # Without errmsg: the exception's arguments.
    bare = _DeadDriverError("")
    assert "JavaObject id=o46" in str(printable(bare))


def _refused_while_converting_a_dead_drivers_error() -> ConnectionRefusedError:
    """What collect() raised in CI after the driver's OutOfMemoryError: PySpark, converting the
    Py4JJavaError, asked the dead JVM again, so the error shown is a ConnectionRefusedError
    whose context is the unprintable Py4JJavaError."""
    try:
        try:
            raise _DeadDriverError("An error occurred while calling o40.collectToPython.\n")
        except _DeadDriverError:
            raise ConnectionRefusedError(111, "Connection refused")  # noqa: B904
    except ConnectionRefusedError as exc:
        return exc


def test_an_unprintable_exception_inside_the_chain_is_replaced_where_it_hangs():
    import traceback

    error = _refused_while_converting_a_dead_drivers_error()
    # Python's own formatter stands in for the text; IPython's raises (the next test).
    assert "<exception str() failed>" in "".join(traceback.format_exception(error))
    shown = printable(error)
    assert shown is error  # the top prints: kept, with its type
    text = "".join(traceback.format_exception(shown))
    assert "An error occurred while calling o40.collectToPython." in text
    assert "the Java exception's text went with the driver JVM" in text
    assert "ConnectionRefusedError: [Errno 111] Connection refused" in text
    assert not shown.__suppress_context__  # the context is still shown
    # A chain that prints is left as it was.
    fine = ValueError("fine")
    fine.__context__ = KeyError("k")
    assert printable(fine) is fine and fine.__context__.args == ("k",)


def _kernel_shell():
    """A real IPython shell that, as ipykernel's ZMQInteractiveShell does in its
    ``_showtraceback`` (the error reply's ``evalue``), turns the shown error into text once more."""
    from IPython.core.interactiveshell import InteractiveShell

    class KernelShell(InteractiveShell):
        def _showtraceback(self, etype, evalue, stb):
            str(evalue)
            return super()._showtraceback(etype, evalue, stb)

    return KernelShell()


def test_the_kernels_handler_survives_a_dead_drivers_chained_error(capsys):
    """A real IPython shell with ScaleLab's handler: the chained error of a dead driver is
    shown, the handler is not unregistered ("Custom TB Handler failed, unregistering")."""
    from scalelab.kernels.spark_errors import install

    shell = _kernel_shell()
    namespace = {"make": _refused_while_converting_a_dead_drivers_error}
    shell.user_ns.update(namespace)
    install(shell, shell.user_ns)
    for _ in range(2):  # the second time proves the handler is still registered
        shell.run_cell("raise make()")
        captured = capsys.readouterr()
        shown = captured.out + captured.err
        assert "Custom TB Handler failed" not in shown
        assert "the Java exception's text went with the driver JVM" in shown
        assert "Connection refused" in shown
    assert shell.custom_exceptions != ()


class _DyingDriverError(Py4JError):
    """Like a Py4JJavaError raised while the driver dies: its first ``str()`` gets the Java
    text, the next ones find the JVM gone (seen in a kernel test: the handler's first look
    worked, ipykernel's later ``str(evalue)`` raised)."""

    looks = 0
    alive_for = 1  # looks that still get the text

    def __str__(self) -> str:
        type(self).looks += 1
        if type(self).looks > type(self).alive_for:
            raise ConnectionRefusedError(111, "Connection refused")
        return "An error occurred while calling o40.collectToPython.\n: java.lang.OutOfMemoryError"


def test_an_exception_whose_text_the_driver_loses_between_two_looks_is_frozen_at_the_first():
    import traceback

    _DyingDriverError.looks, _DyingDriverError.alive_for = 0, 1
    error = _DyingDriverError("o40")
    shown = printable(error)
    for _ in range(3):
        assert str(shown).endswith("java.lang.OutOfMemoryError")
    assert type(shown).__name__ == "_DyingDriverError" and shown is not error
    assert isinstance(shown, _DyingDriverError) and shown.args == ("o40",)
    assert printable(shown) is shown  # frozen once
    assert shown.__traceback__ is error.__traceback__
    text = "".join(traceback.format_exception(shown))
    assert "_DyingDriverError: An error occurred while calling o40.collectToPython." in text


def test_the_kernels_handler_survives_a_driver_that_dies_while_its_error_is_shown(
    capsys, monkeypatch
):
    """Whenever the JVM dies while the error is being shown (after the 1st, 2nd, ... look at
    its text), the handler stays registered and the text of the first look is shown."""
    from scalelab.kernels import spark_errors
    from scalelab.kernels.spark_errors import install

    monkeypatch.setattr(spark_errors, "DRIVER_EXIT_WAIT_S", 0.0)  # no driver here to wait for

    shell = _kernel_shell()
    shell.user_ns["DyingDriverError"] = _DyingDriverError
    install(shell, shell.user_ns)
    assert issubclass(_DyingDriverError, shell.custom_exceptions)  # the handler sees it
    for alive_for in range(1, 6):
        _DyingDriverError.looks, _DyingDriverError.alive_for = 0, alive_for
        shell.run_cell("raise DyingDriverError('o40')")
        captured = capsys.readouterr()
        shown = captured.out + captured.err
        assert "Custom TB Handler failed" not in shown, alive_for
        assert "An error occurred while calling o40.collectToPython." in shown, alive_for
        assert shell.custom_exceptions != ()
        # ipykernel's execute reply: ename and evalue of the cell's error, after the cell.
        error = shell.last_execution_result.error_in_exec
        assert type(error).__name__ == "_DyingDriverError"
        assert str(error).startswith("An error occurred while calling o40.collectToPython.")


def test_a_java_error_whose_text_the_dead_driver_held_is_explained_as_a_driver_gone():
    """Seen in a kernel test: collect()'s Py4JJavaError came back while the driver died, its
    text could no longer be fetched and no other part of it names Py4J's connection."""
    from scalelab.kernels.spark_errors import TEXT_UNREACHABLE

    try:
        raise _DeadDriverError("An error occurred while calling o40.collectToPython.\n")
    except _DeadDriverError as exc:
        text = describe(exc)
    assert TEXT_UNREACHABLE in text and "o40.collectToPython" in text
    explanation = explain(text, LOCAL, {})
    assert explanation is not None and explanation.settings == ("spark.driver.memory",)
    assert "driver JVM is gone" in explanation.title


#: Spark's write into a folder HDFS does not let the student write (the namenode's
#: AccessControlException through Py4J), as the hub-on-HDFS test meets it.
HDFS_REFUSED = (
    "Py4JJavaError Exception: An error occurred while calling o54.text.\n"
    ": org.apache.hadoop.security.AccessControlException: Permission denied: user=alice, "
    'access=WRITE, inode="/course/datasets":root:supergroup:drwxr-xr-x\n'
    "\tat org.apache.hadoop.hdfs.server.namenode.FSPermissionChecker.check("
    "FSPermissionChecker.java:506)\n"
)


def test_an_hdfs_refusal_names_the_namenodes_reason_and_the_students_home():
    explanation = explain(HDFS_REFUSED, LOCAL, {"JUPYTERHUB_USER": "alice"})
    assert explanation is not None
    assert explanation.title.startswith(
        'HDFS refused it: Permission denied: user=alice, access=WRITE, inode="/course/datasets"'
        ":root:supergroup:drwxr-xr-x. "
    )
    assert "store_url('home/alice/results')" in explanation.fix


#: Spark 4.3's words for a barrier stage larger than the cluster (TorchDistributor asking 3 ranks
#: of a standalone cluster of two 1-core workers; tests/integration/spark/test_torch_distributor.py
#: does it live).
BARRIER = (
    "Py4JJavaError: An error occurred while calling o49.collectToPython.\n"
    ": org.apache.spark.scheduler.BarrierJobSlotsNumberCheckFailed: [SPARK-24819]: Barrier "
    "execution mode does not allow run a barrier stage that requires more slots than the total "
    "number of slots in the cluster currently. Please init a new cluster with more resources(e.g. "
    "CPU, GPU) or repartition the input RDD(s) to reduce the number of slots required to run "
    "this barrier stage.\n\tat org.apache.spark.errors.SparkCoreErrors$."
    "numPartitionsGreaterThanMaxNumConcurrentTasksError(SparkCoreErrors.scala:241)"
)


def test_a_barrier_stage_larger_than_the_cluster_names_num_processes_and_the_slots():
    live = {"spark.master": "spark://m:7077", "scalelab.live.slots": "2"}
    explanation = explain(BARRIER, {**live, "scalelab.live.executors": "2"}, {})
    assert explanation is not None and explanation.settings[0] == "num_processes"
    assert "spark://m:7077 offers 2 task slot(s) now (2 executor(s))" in explanation.title
    assert "at most 2 processes" in explanation.fix
    unknown = explain(BARRIER, {"spark.master": "yarn"}, {})  # a dead JVM: no live figures
    assert unknown is not None and "yarn has fewer" in unknown.title


#: Spark 4.3's words (its spark-core jar) when a barrier stage runs with dynamic allocation on.
BARRIER_DYNAMIC = (
    "Py4JJavaError: An error occurred while calling o61.collectToPython.\n"
    ": org.apache.spark.scheduler.BarrierJobRunWithDynamicAllocationException: [SPARK-24942]: "
    "Barrier execution mode does not support dynamic resource allocation for now. You can "
    'disable dynamic resource allocation by setting Spark conf "spark.dynamicAllocation.enabled" '
    'to "false".'
)


def test_training_with_dynamic_allocation_on_names_the_setting_and_who_turns_it_off():
    explanation = explain(BARRIER_DYNAMIC, {"spark.master": "yarn"}, {})
    assert explanation is not None
    assert explanation.settings == ("spark.dynamicAllocation.enabled",)
    assert "needs a fixed set of executors" in explanation.title
    assert "c.ScaleLabSpawner.spark_conf" in explanation.fix
    assert explain(BARRIER, {"spark.master": "yarn"}, {}).settings[0] == "num_processes"


def _interrupted_py4j_call() -> BaseException:
    """What a cell raises when the student interrupts it while it waits in a Py4J call: py4j
    re-raises the interrupt, and a ``finally`` on the way out calls the driver on the closed
    connection (seen in CI with TorchDistributor)."""
    from py4j.protocol import Py4JNetworkError

    try:
        try:
            raise KeyboardInterrupt
        finally:
            raise Py4JNetworkError("Error while sending or receiving")
    except Py4JNetworkError as exc:
        return exc


def test_an_interrupt_cut_py4j_call_is_shown_and_replied_as_the_interrupt(capsys):
    from scalelab.kernels.spark_errors import install

    shell = _kernel_shell()
    shell.user_ns["cut"] = _interrupted_py4j_call
    install(shell, shell.user_ns)
    result = shell.run_cell("raise cut()")
    shown = "".join(capsys.readouterr())
    assert isinstance(result.error_in_exec, KeyboardInterrupt)  # what the reply names
    assert "KeyboardInterrupt" in shown
    assert "driver JVM is gone" not in shown and "Restart the kernel" not in shown


def test_interrupt_in_finds_the_interrupt_in_the_chain_only():
    from scalelab.kernels.spark_interrupt import interrupt_in

    error = _interrupted_py4j_call()
    assert isinstance(interrupt_in(error), KeyboardInterrupt)
    assert isinstance(interrupt_in(KeyboardInterrupt()), KeyboardInterrupt)
    assert interrupt_in(ValueError("x")) is None and interrupt_in(None) is None
    looped = ValueError("a")
    looped.__context__ = ValueError("b")
    looped.__context__.__context__ = looped
    assert interrupt_in(looped) is None


def test_py4js_tracebacks_on_the_root_logger_are_kept_from_the_cell():
    import logging

    from scalelab.kernels.spark_errors import Py4JRootLines

    keep = Py4JRootLines()
    py4j = "/srv/.venv/lib/python3.11/site-packages/py4j/java_gateway.py"

    def record(message: str, path: str = py4j) -> logging.LogRecord:
        return logging.LogRecord("root", logging.ERROR, path, 1, message, None, None)

    assert not keep.filter(record("KeyboardInterrupt while sending command."))
    # Regression (issue 34, Must 6): a dead driver's 29-line dump came before the explanation.
    assert not keep.filter(record("Exception while sending command."))
    assert keep.filter(record("Exception while sending command.", "/tmp/ipykernel_1/2.py"))
    assert keep.filter(record("Error while receiving."))


#: pyspark's TorchDistributor (``_get_num_tasks``) on a session whose tasks have no GPU, with
#: its default ``use_gpu=True`` (the message as pyspark 4 words it).
TORCH_NO_GPU = "'spark.task.resource.gpu.amount' was unset, so gpu usage is unavailable."


def test_torchdistributors_default_use_gpu_on_a_cpu_session_names_use_gpu_false(capsys):
    from scalelab.kernels.spark_errors import install

    shell = _kernel_shell()
    install(shell, shell.user_ns)
    result = shell.run_cell(f"raise RuntimeError({TORCH_NO_GPU!r})")
    shown = "".join(capsys.readouterr())
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "ScaleLab: TorchDistributor asks for GPUs unless told otherwise" in shown
    assert "Setting to change: use_gpu, spark.task.resource.gpu.amount" in shown
    assert "use_gpu=False" in shown
    assert TORCH_NO_GPU in shown  # the error itself stays below
    other = shell.run_cell("raise RuntimeError('a plain runtime error')")
    plain = "".join(capsys.readouterr())
    assert isinstance(other.error_in_exec, RuntimeError)
    assert "a plain runtime error" in plain and "ScaleLab:" not in plain  # left as IPython shows it


def test_a_lost_drivers_accumulator_connection_prints_nothing(capsys):
    # Regression (issue 34, Must 6): a ~20-line EOFError from the accumulator server's thread
    # came before the explanation in the cell.
    from pyspark import accumulators

    from scalelab.kernels.spark_errors import quiet_accumulator_servers

    quiet_accumulator_servers()
    quiet_accumulator_servers()  # idempotent
    server = accumulators.AccumulatorTCPServer.__new__(accumulators.AccumulatorTCPServer)
    for error, printed in (
        (EOFError(), False),
        (ConnectionResetError(), False),
        (KeyError(), True),
    ):
        try:
            raise error
        except (EOFError, ConnectionError, KeyError):
            server.handle_error(None, ("127.0.0.1", 1))
        err = capsys.readouterr().err
        assert ("Exception occurred during processing" in err) is printed, (error, err)


class Py4JJavaError(Py4JError):
    """Stands in for py4j's own (its name is what the explanation reads): a Java exception's
    text, fetched while the driver still answered."""


@pytest.mark.parametrize(
    "java_text",
    [
        # The task's OutOfMemoryError came back first (the job aborted).
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 "
        "failed 1 times: java.lang.OutOfMemoryError: Java heap space",
        # Spark's uncaught-exception handler's shutdown hook stopped the context first: the
        # job was cancelled (seen in two whole-suite runs of 2026-12-07, explained as a driver
        # gone "so the Py4J connection failed", without its exit code).
        "org.apache.spark.SparkException: Job 1 cancelled because SparkContext was shut down",
    ],
)
def test_a_driver_that_ends_itself_after_an_oom_is_explained_so_whichever_error_came_first(
    monkeypatch, java_text: str
):
    from scalelab.kernels import spark_errors

    looks = iter([None, None, None, spark_errors.SPARK_EXIT_OOM])  # the JVM ends a moment later
    monkeypatch.setattr(spark_errors, "driver_exit_status", lambda: next(looks, 52))
    error = Py4JJavaError(f"An error occurred while calling o45.collectToPython.\n: {java_text}")
    explanation = spark_errors._explanation(error, {})
    assert explanation is not None
    assert explanation.title.startswith(
        "the Spark driver JVM stopped itself after a java.lang.OutOfMemoryError (exit code 52)"
    ), explanation.title
