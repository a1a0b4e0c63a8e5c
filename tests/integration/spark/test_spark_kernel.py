"""The PySpark kernel for real (jupyter_client, ipykernel, local Spark): `spark` does not block the
first cell, the Spark UI and driver log are wired, and each Spark failure is explained once, below
the failing cell, naming the setting to change."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import requests

from tests.support.kernelrun import Kernel, folded_traces

EXPLANATION = "ScaleLab: "


def _env(kernel_environment: dict[str, str], tmp_path: Path, **extra: str) -> dict[str, str]:
    """The kernel's environment as a student's server gives it: without pytest's
    ``PYTEST_CURRENT_TEST``, with which ipykernel would not bring what the kernel process and
    its JVM write to fd 1 and 2 into the cell."""
    env = {k: v for k, v in kernel_environment.items() if k != "PYTEST_CURRENT_TEST"}
    return {**env, "SCALELAB_LOG_DIR": str(tmp_path / "logs"), **extra}


def test_first_cell_runs_while_spark_starts_then_spark_works(
    kernel_environment: dict[str, str], tmp_path: Path
):
    # Which classes the driver JVM loaded, and from where (an ops' option, kept before ours).
    loaded = tmp_path / "classes.log"
    ops = json.dumps({"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={loaded}"})
    env = _env(kernel_environment, tmp_path, SCALELAB_GPUS="GPU-fake-0000", SCALELAB_SPARK_CONF=ops)
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        first = kernel.run("type(spark).__name__, spark.done(), 6 * 7")
        # The session takes seconds to build; the first cell did not wait for it.
        assert first["result"] == "('LazySparkSession', False, 42)"
        # ScaleLab's notices are normal output, not stderr (issue 13).
        assert "ScaleLab pyspark kernel: GPUs: GPU-fake-0000" in first["stdout"]
        assert "starting in the background" in first["stdout"]
        assert "ScaleLab" not in first["stderr"]

        counted = kernel.run("spark.range(1000).selectExpr('sum(id)').first()[0]")
        assert counted["result"] == "499500", counted
        [ready] = counted["display"]
        ui = re.search(r"Spark UI: http://127\.0\.0\.1:(\d+)/jobs/", ready["text/plain"])
        assert ui, ready
        link = f'<a href="http://127.0.0.1:{ui.group(1)}/jobs/" target="_blank" rel="noopener">'
        assert link in ready["text/html"]
        assert "Spark UI" not in counted["stderr"] + counted["stdout"]

        after = kernel.run(
            "type(spark).__name__, spark.conf.get('spark.ui.port'), sc.master, "
            "spark.conf.get('spark.driver.memory')"
        )
        assert after["result"] == f"('SparkSession', '{ui.group(1)}', 'local[2]', '1g')"
        assert after["display"] == []

        logs = list((tmp_path / "logs").glob("spark-driver-*.log"))
        assert len(logs) == 1
        assert "INFO SparkContext: Running Spark version" in logs[0].read_text()
    # Spark's classes came from the class-data archive install.sh built, not from the jars.
    classes = loaded.read_text()
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in classes


def test_store_is_the_same_for_spark_and_fsspec(kernel_environment: dict[str, str], tmp_path: Path):
    env = _env(kernel_environment, tmp_path)
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run(
            "from scalelab.store import store_url\n"
            "df = spark.createDataFrame([(1, 'a'), (2, 'b')], 'k int, v string')\n"
            "df.write.mode('overwrite').parquet(store_url('home/tester/kv'))\n"
            "names = store.ls('home/tester/kv', detail=False)\n"
            "sorted(p.rsplit('/', 1)[-1].split('-')[0] for p in names"
            " if p.endswith('.parquet'))[:1], "
            "spark.read.parquet(store_url('home/tester/kv')).count()"
        )
        assert out["error"] is None, out
        assert out["result"] == "(['part'], 2)"


def test_spark_stop_then_spark_gets_a_new_session_or_the_students_own(
    kernel_environment: dict[str, str], tmp_path: Path
):
    """After ``spark.stop()`` the next use of ``spark`` or ``sc`` gets a new session with the
    course settings (said in one line); using it in the cell that stopped it is explained; a
    student who stops it to make their own session gets theirs (issue 13)."""
    env = _env(kernel_environment, tmp_path)
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        assert kernel.run("spark.range(3).count()")["result"] == "3"
        assert kernel.run("spark.stop()")["error"] is None
        notice = kernel.run("type(spark).__name__, type(sc).__name__")
        assert notice["result"] == "('LazySparkSession', 'LazySparkContext')", notice
        assert notice["stdout"].count("ScaleLab: `spark` was stopped (spark.stop())") == 1
        assert "Traceback" not in notice["stderr"]
        again = kernel.run("spark.range(5).count(), sc.parallelize([1, 2]).sum()")
        assert again["result"] == "(5, 3)", again
        assert "ScaleLab" not in again["stdout"]  # told once

        same_cell = kernel.run("spark.stop()\nspark.range(2).count()")
        assert same_cell["error"] is not None and same_cell["error"][0] == "AttributeError"
        assert (
            "ScaleLab: `spark` was stopped (spark.stop() or sc.stop()) earlier in this cell"
            in (same_cell["stderr"])
        )
        assert kernel.run("spark.range(4).count()")["result"] == "4"

        kernel.run("spark.stop()")
        own = kernel.run(
            "from pyspark.sql import SparkSession\n"
            "spark = SparkSession.builder.config('spark.sql.shuffle.partitions', '7')"
            ".getOrCreate()\n"
            "spark.conf.get('spark.sql.shuffle.partitions'), spark.range(6).count()"
        )
        assert own["result"] == "('7', 6)", own
        assert kernel.run("type(spark).__name__")["result"] == "'SparkSession'"


def test_known_harmless_warnings_are_silenced_and_real_ones_still_show(
    kernel_environment: dict[str, str], tmp_path: Path
):
    """PySpark's pandas >= 3 FutureWarning at every toPandas(), Spark ML's "regParam is zero",
    the block manager's "already exists on this machine", Hadoop's native-library warning and
    the shell's "Setting default log level" notice are silenced at their source (a warning
    filter by message; the driver's log4j2 settings); a warning of any other text, from Python
    or from the JVM, still shows (issue 13)."""
    env = _env(kernel_environment, tmp_path)
    output = tmp_path / "kernel-output.txt"  # the kernel process's own stderr: its JVM's lines
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path), output=output) as kernel:
        pandas = kernel.run("len(spark.range(3).toPandas())")
        assert pandas["result"] == "3" and "pandas >= 3" not in pandas["stderr"], pandas
        fit = kernel.run(
            "from pyspark.ml.linalg import Vectors\n"
            "from pyspark.ml.regression import LinearRegression\n"
            "rows = [(1.0, Vectors.dense([1.0])), (2.0, Vectors.dense([2.0]))]\n"
            "df = spark.createDataFrame(rows, ['label', 'features'])\n"
            "float(round(LinearRegression(maxIter=5).fit(df).coefficients[0], 3))"
        )
        assert fit["result"] == "1.0", fit
        real = kernel.run("import warnings\nwarnings.warn('a real one')")
        assert "UserWarning: a real one" in real["stderr"]
        jvm = kernel.run(
            "spark._jvm.org.apache.logging.log4j.LogManager.getLogger('scalelab.test')"
            ".warn('a real JVM warning')"
        )
        assert jvm["error"] is None, jvm
        # The block manager's race on a cached partition (once in CI, in Lab 1's
        # cross-validation) is silenced by its text; its other warnings still show.
        blocks = kernel.run(
            "log = spark._jvm.org.apache.logging.log4j.LogManager"
            ".getLogger('org.apache.spark.storage.BlockManager')\n"
            "log.warn('Block rdd_916_0 already exists on this machine; not re-adding it')\n"
            "log.warn('a real block manager warning')"
        )
        assert blocks["error"] is None, blocks
        # The JVM's stderr reaches the kernel's through a forwarding thread: wait for the line.
        deadline = time.monotonic() + 30
        while "a real block manager warning" not in output.read_text():
            assert time.monotonic() < deadline, output.read_text()
            time.sleep(0.2)
    jvm_lines = output.read_text()
    assert "WARN test: a real JVM warning" in jvm_lines
    assert "WARN BlockManager: a real block manager warning" in jvm_lines
    assert "not re-adding it" not in jvm_lines
    for harmless in ("regParam is zero", "native-hadoop", "Setting default log level"):
        assert harmless not in jvm_lines, jvm_lines
    [log] = (tmp_path / "logs").glob("spark-driver-*.log")
    assert "INFO SparkContext: Running Spark version" in log.read_text()  # the file keeps INFO


def test_java_missing_is_explained_and_the_kernel_lives(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = _env(kernel_environment, tmp_path, JAVA_HOME=str(tmp_path / "no-java-here"))
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run("spark.range(3).count()")
        assert out["error"][0] == "SparkStartError"
        assert out["stderr"].count(EXPLANATION) == 1
        assert "Setting to change: JAVA_HOME" in out["stderr"]
        assert f"JAVA_HOME={tmp_path / 'no-java-here'}" in out["stderr"]
        assert kernel.run("1 + 1")["result"] == "2"
        assert kernel.km.is_alive()


def test_max_result_size_python_worker_off_heap_and_a_dead_driver(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = _env(kernel_environment, tmp_path)
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        # What the explanation tells the student to do, with a tiny limit.
        rebuilt = kernel.run(
            "spark.stop()\n"
            "from pyspark.sql import SparkSession\n"
            "spark = (SparkSession.builder.config('spark.driver.maxResultSize', '1m')"
            ".config('spark.executor.pyspark.memory', '64m').getOrCreate())\n"
            "spark.conf.get('spark.driver.maxResultSize')"
        )
        assert rebuilt["result"] == "'1m'", rebuilt

        # The driver logs an ERROR while the cell runs, a second before the failure (as a dying
        # driver does): it waits for the cell's end, below the explanation, and is not lost.
        big = kernel.run(
            "import time\n"
            "spark._jvm.org.apache.logging.log4j.LogManager.getLogger('scalelab.test')"
            ".error('a real JVM error in the cell')\n"
            "time.sleep(1)\n"
            "rows = spark.range(0, 2_000_000, numPartitions=4)"
            ".selectExpr('id', \"repeat('x', 20) as s\").collect()"
        )
        assert big["error"] is not None
        assert big["stderr"].count(EXPLANATION) == 1
        assert "Setting to change: spark.driver.maxResultSize" in big["stderr"]
        assert "(1m)" in big["stderr"]
        _explained_first(big)
        later = big["stderr"] + kernel.run("import time; time.sleep(1)")["stderr"]
        assert "ERROR test: a real JVM error in the cell" in later, big["order"]

        pandas = kernel.run(
            "pdf = spark.range(0, 2_000_000, numPartitions=4)"
            ".selectExpr('id', \"repeat('x', 20) as s\").toPandas()"
        )
        assert "Setting to change: spark.driver.maxResultSize" in pandas["stderr"]

        worker = kernel.run(
            "spark.sparkContext.parallelize(range(2), 2)"
            ".map(lambda _: len(bytearray(512 * 1024 * 1024))).collect()"
        )
        assert worker["error"][0] == "PythonException"
        assert worker["stderr"].count(EXPLANATION) == 1
        assert "Setting to change: spark.executor.pyspark.memory" in worker["stderr"]

        # Off-heap execution memory too small for an aggregation.
        off_heap = kernel.run(
            "spark.stop()\n"
            "spark = (SparkSession.builder.config('spark.memory.offHeap.enabled', 'true')"
            ".config('spark.memory.offHeap.size', '1m').getOrCreate())\n"
            "spark.range(0, 3_000_000, numPartitions=1)"
            ".selectExpr('id % 1000000 as k', \"repeat('x', 50) as v\")"
            ".groupBy('k').agg({'v': 'max'}).count()"
        )
        assert off_heap["error"] is not None
        assert off_heap["stderr"].count(EXPLANATION) == 1
        assert (
            "Setting to change: spark.memory.offHeap.enabled, spark.memory.offHeap.size"
            in off_heap["stderr"]
        )
        assert "spark.memory.offHeap.size=1m" in off_heap["stderr"]

        fine = kernel.run("spark.range(10).count()")
        assert fine["result"] == "10" and EXPLANATION not in fine["stderr"]

        # The driver JVM dies (as after an OutOfMemoryError kill): the next call is an opaque
        # "Connection refused" from Py4J.
        kernel.run(
            "spark.sparkContext._gateway.proc.kill(); spark.sparkContext._gateway.proc.wait()"
        )
        dead = kernel.run("spark.range(3).count()")
        assert dead["error"] is not None
        assert dead["stderr"].count(EXPLANATION) == 1
        assert "Setting to change: spark.driver.memory" in dead["stderr"]
        assert kernel.km.is_alive()


def test_driver_killed_during_a_call_is_explained(
    kernel_environment: dict[str, str], tmp_path: Path
):
    """The JVM dies while a job runs (what local mode's OutOfMemoryError exit does, at a time
    that depends on the machine): py4j raises a bare Py4JError, explained all the same."""
    env = _env(kernel_environment, tmp_path, SCALELAB_SPARK_MASTER="local[1]")
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        assert kernel.run("spark.range(3).count()")["result"] == "3"
        out = kernel.run(
            "import threading\n"
            "proc = spark.sparkContext._gateway.proc\n"
            "threading.Timer(3, proc.kill).start()\n"
            "spark.range(0, 10**12, numPartitions=1).selectExpr('sum(id % 7)').collect()",
            timeout_s=300,
        )
        assert out["error"] is not None
        assert out["stderr"].count(EXPLANATION) == 1, out
        assert "Error in callback" not in out["stdout"]  # the explaining hook never fails
        assert "Setting to change: spark.driver.memory" in out["stderr"]
        assert "exit code -9" in out["stderr"]
        assert kernel.km.is_alive()


#: A cell that runs the driver out of memory with spark.driver.memory 512m in local mode: the
#: issue's collect of a large result (issue 34, Must 6).
OUT_OF_MEMORY = "spark.range(60_000_000).selectExpr('id', 'repeat(\"x\", 40) as s').collect()"


def test_driver_out_of_memory_is_explained_the_same_way_every_time(
    kernel_environment: dict[str, str], tmp_path: Path
):
    """Regression (issue 34, Must 6): the same cell, run three times, gave the explanation
    after a stderr block once, one or two error outputs of 144-224 lines (a second one raised
    by IPython's history turning the dead driver's error into text), and explanations that
    alternated with the race between the Java error's text and the JVM's end."""
    env = _env(
        kernel_environment,
        tmp_path,
        SCALELAB_SPARK_MASTER="local[1]",
        SCALELAB_SPARK_DRIVER_MEMORY="512m",
    )
    titles = set()
    for attempt in range(2):
        output = tmp_path / f"kernel-output-{attempt}.txt"  # the kernel process's fd 1 and 2
        with Kernel("scalelab-pyspark", env, cwd=str(tmp_path), output=output) as kernel:
            assert kernel.run("spark.range(3).count()")["result"] == "3"  # banner out of the way
            out = kernel.run(OUT_OF_MEMORY, timeout_s=600)
            reply = kernel.kc.execute_interactive("1 + 1", timeout=60)["content"]
        seen = f"{out!r}\n-- the kernel process's own output:\n{output.read_text()[-6000:]}"
        assert out["error"] is not None, seen
        assert out["stderr"].count(EXPLANATION) == 1, seen
        assert "Error in callback" not in out["stdout"]  # the explaining hook never fails
        assert "Setting to change: spark.driver.memory" in out["stderr"]
        assert "now 512m" in out["stderr"]
        # The answer is the first thing under the cell: nothing comes before it.
        shown = [
            (kind, text) for kind, text in out["order"] if kind not in ("status", "execute_input")
        ]
        assert shown[0][0] == "stderr" and shown[0][1].startswith(EXPLANATION), seen
        _explained_first(out)
        # The reply names the error shown (not a second one, raised after it).
        assert out["ename"] == out["error"][0], seen
        assert reply["status"] == "ok"  # the kernel lives on
        titles.add(out["stderr"].split(EXPLANATION, 1)[1].split("\n", 1)[0])
    # One explanation, whichever the race gave first (the JVM ends itself: exit code 52).
    assert len(titles) == 1, titles
    assert "OutOfMemoryError (exit code 52)" in titles.pop()


def _explained_first(out: dict) -> None:
    """The explanation (stderr) came first, then one short error output, then the Python and
    Java traces as one folded block (kernels/trace_block.py) whose Java frames are folded; the
    exception's own lines are kept (issues 13 and 34)."""
    kinds = [kind for kind, _ in out["order"]]
    explained = [i for i, (kind, text) in enumerate(out["order"]) if EXPLANATION in text]
    assert explained and "error" in kinds, out["order"]
    assert explained[0] < kinds.index("error"), out["order"]
    # Nothing red above it: the scheduler's and executor's log lines about the failed task
    # (WARN TaskSetManager: Lost task ..., ERROR TaskSetManager: ... aborting job) go to the
    # driver's log file only, since the exception below says the same.
    # Nor what the driver prints while it dies (its threads' OutOfMemoryErrors, log4j's ERROR
    # records): that waits for the cell's end (spark_session.DRIVER_ERRORS; CI, 2026-12-07).
    first = out["order"][explained[0]][1]
    above = [text for kind, text in out["order"][: explained[0]] if kind == "stderr"]
    above.append(first[: first.index(EXPLANATION)])
    assert not "".join(above).strip(), out["order"]
    assert "TaskSetManager" not in out["stderr"] and "WARN Executor" not in out["stderr"]
    # The handler itself never fails (IPython would unregister it: no explanation any more).
    assert "Custom TB Handler failed" not in out["stderr"], out["stdout"]
    # One error output, of one line: the exception's type and its first line.
    assert kinds.count("error") == 1, out["order"]
    assert len(out["traceback"]) == 1 and out["error"][0] in out["traceback"][0]
    assert "\n" not in out["traceback"][0]
    # Then the traces, one block, folded in the browser (<details> without "open").
    [block] = folded_traces(out)
    assert block["text/html"].startswith('<details class="scalelab-trace"><summary>')
    shown = [kind for kind in kinds if kind not in ("status", "execute_input")]
    assert shown[shown.index("error") + 1] == "display_data", out["order"]  # right below it
    trace = block["text/plain"]
    assert out["error"][0] in trace
    java_frames = [line for line in trace.splitlines() if line.lstrip().startswith("at ")]
    assert len(java_frames) <= 40, len(java_frames)


def test_tensorflow_kernel_says_memory_growth_is_on(
    kernel_environment: dict[str, str], tmp_path: Path
):
    with Kernel("scalelab-tensorflow", _env(kernel_environment, tmp_path)) as kernel:
        out = kernel.run("import os; os.environ['TF_FORCE_GPU_ALLOW_GROWTH']")
        assert out["result"] == "'true'"
        assert "ScaleLab tensorflow kernel: CPU only" in out["stdout"]
        assert "GPU memory growth on" in out["stdout"]


def test_two_drivers_on_one_machine_get_their_own_ui(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = _env(kernel_environment, tmp_path)
    with (
        Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as first,
        Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as second,
    ):
        ports = []
        for kernel in (first, second):
            out = kernel.run("spark.sparkContext.uiWebUrl.rsplit(':', 1)[1]")
            assert out["error"] is None, out
            ports.append(int(out["result"].strip("'")))
        assert ports[0] != ports[1]
        for port in ports:
            page = requests.get(f"http://127.0.0.1:{port}/jobs/", timeout=60)
            assert page.status_code == 200 and "Spark Jobs" in page.text
