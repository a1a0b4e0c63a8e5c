"""Spark failures explained in the notebook: what happened and the exact setting to change.

:func:`explain` (pure) matches a failing cell's exception against known patterns and returns an
:class:`Explanation` naming the setting; :func:`install` makes IPython show it first in the
cell's output, above a traceback whose Java frames are folded (:func:`fold_java_frames`).
Why: docs/design-notes.md, scalelab.kernels.spark_errors.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scalelab import envvars
from scalelab.kernels.spark_defaults import DEFAULT_SPARK_MASTER


@dataclass(frozen=True)
class Explanation:
    """What went wrong in Spark and how to fix it.

    Attributes
    ----------
    title
        One line: what happened.
    settings
        The settings to change, most important first (``spark.driver.memory``, ``JAVA_HOME``).
    fix
        What to do, with values.
    """

    title: str
    settings: tuple[str, ...]
    fix: str

    def text(self) -> str:
        """The message printed in the notebook (several lines)."""
        return (
            f"ScaleLab: {self.title}\n"
            f"  Setting to change: {', '.join(self.settings)}\n"
            f"  Fix: {self.fix}"
        )


def _size(conf: Mapping[str, str], key: str, default: str) -> str:
    return conf.get(key) or default


def _java_missing(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    java_home = env.get("JAVA_HOME")
    where = f"JAVA_HOME={java_home}" if java_home else "JAVA_HOME is not set"
    return Explanation(
        "Spark could not start its driver JVM: Java was not found, or it exited at start "
        f"({where}).",
        ("JAVA_HOME", "spark.driver.memory"),
        "install Java 17 (check with `java -version`) and set JAVA_HOME to its folder "
        "(e.g. /usr/lib/jvm/java-17-openjdk-amd64), or unset a JAVA_HOME that points nowhere; "
        f"check that spark.driver.memory ({_size(conf, 'spark.driver.memory', '1g')}) is a JVM "
        "size such as 2g. Then restart the kernel.",
    )


#: Spark's exit status for a JVM that stopped itself after an ``OutOfMemoryError``
#: (``SparkExitCode.OOM`` in Spark's core, used by ``SparkUncaughtExceptionHandler``).
SPARK_EXIT_OOM = 52

_EXIT = re.compile(r"\[driver JVM exited with code (-?\d+)\]")
#: What :func:`describe` adds to an exception whose text could not be had: its ``__str__``
#: asks the driver JVM (a ``Py4JJavaError``), which did not answer, so the driver is gone.
TEXT_UNREACHABLE = "[its text is held by the driver JVM, which does not answer]"
#: A failure after which the driver JVM may end on its own: an OutOfMemoryError (Spark's
#: uncaught-exception handler exits with :data:`SPARK_EXIT_OOM`), a connection to it refused,
#: a job cancelled because the SparkContext was shut down (that handler's shutdown hook stops
#: the context first: the cell may see this before the JVM has ended).
_MAY_END_THE_DRIVER = re.compile(
    r"OutOfMemoryError|ConnectionRefusedError|Py4JNetworkError"
    r"|cancelled because SparkContext was shut down"
)


def _driver_gone(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    memory = _size(conf, "spark.driver.memory", "1g")
    exited = _EXIT.search(text)
    code = int(exited.group(1)) if exited else None
    if code == SPARK_EXIT_OOM:
        how = (
            f"the Spark driver JVM stopped itself after a java.lang.OutOfMemoryError (exit code "
            f"{SPARK_EXIT_OOM}): collect()/toPandas() of a large result, a large broadcast, or "
            "(in local mode) a task's data in the driver's heap."
        )
    else:
        status = f" (exit code {code})" if code is not None else ""
        how = (
            f"the Spark driver JVM is gone{status}, so the Py4J connection to it failed. This "
            "is almost always the driver running out of memory: collect()/toPandas() of a large "
            "result, a large broadcast, or (in local mode) a task's data in the driver's heap."
        )
    return Explanation(
        how,
        ("spark.driver.memory",),
        f"raise spark.driver.memory (now {memory}): choose a larger 'Spark driver memory' in "
        "the spawn form and restart the server, or bring less data to the driver (.limit(n), "
        "aggregate first, write results to the store). Restart the kernel to get a new `spark`.",
    )


def _heap(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    local = conf.get("spark.master", "local").startswith("local")
    executor = not local and re.search(r"executor|ExecutorLostFailure|in stage", text, re.I)
    if executor:
        memory = _size(conf, "spark.executor.memory", "1g")
        return Explanation(
            "a Spark executor ran out of Java heap memory (java.lang.OutOfMemoryError).",
            ("spark.executor.memory",),
            f"raise spark.executor.memory (now {memory}), or use more, smaller partitions "
            "(df.repartition(n)) so each task holds less.",
        )
    memory = _size(conf, "spark.driver.memory", "1g")
    return Explanation(
        "the Spark driver ran out of Java heap memory (java.lang.OutOfMemoryError)"
        + (" -- in local mode the tasks run inside the driver too." if local else "."),
        ("spark.driver.memory",),
        f"raise spark.driver.memory (now {memory}) with the spawn form's 'Spark driver memory' "
        "and restart the server, or bring less data to the driver (.limit(n), aggregate first).",
    )


#: YARN's measure of a killed container, as Spark reports it: "1.5 GB of 896 MB physical memory
#: used" (Hadoop's ContainersMonitorImpl; Spark's YarnAllocator quotes it).
_CONTAINER_USAGE = re.compile(r"([\d.]+ [KMGT]?B) of ([\d.]+ [KMGT]?B) physical memory used")


#: A JVM size as Spark reads ``spark.executor.memoryOverhead``: a number, MiB without a unit.
_JVM_SIZE = re.compile(r"(\d+)([kmgt]?)b?", re.I)
_MIB_PER_UNIT = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}


def suggested_overhead(overhead: str | None) -> str:
    """A larger ``spark.executor.memoryOverhead`` to suggest: twice ``overhead`` (a JVM size,
    MiB without a unit), at least 1g; ``"1g"`` when it is unset or unreadable (Spark's default,
    max(384 MiB, 10 % of the heap), is below that). Whole GiB as ``"<n>g"``, else ``"<n>m"``
    (pure)."""
    found = _JVM_SIZE.fullmatch((overhead or "").strip())
    if not found:
        return "1g"
    mib = max(1024, 2 * int(int(found.group(1)) * _MIB_PER_UNIT[found.group(2).lower()]))
    return f"{mib // 1024}g" if mib % 1024 == 0 else f"{mib}m"


def _overhead(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    overhead = conf.get("spark.executor.memoryOverhead") or "max(384m, 10% of executor memory)"
    more = suggested_overhead(conf.get("spark.executor.memoryOverhead"))
    heap = _size(conf, "spark.executor.memory", "1g")
    if conf.get("spark.memory.offHeap.enabled", "false").lower() == "true":
        off_heap = (
            f"off-heap memory is on (spark.memory.offHeap.size="
            f"{conf.get('spark.memory.offHeap.size', '0')}) and the container must hold it "
            "too: lower it or raise the overhead"
        )
    else:
        off_heap = "off-heap memory is off (spark.memory.offHeap.enabled=false), so it takes none"
    usage = _CONTAINER_USAGE.search(text)
    who = "YARN" if re.search(r"\bYARN\b", text) else "its cluster manager"
    measured = f" ({usage.group(1)} used of its {usage.group(2)})" if usage else ""
    return Explanation(
        f"{who} killed a Spark executor's container for using more memory than the container "
        f"was given{measured} -- the executor, not the driver (spark.driver.memory does not "
        "help). A container holds the executor's Java heap (spark.executor.memory), its "
        "off-heap memory (spark.memory.offHeap.size) and everything else native, counted in "
        "spark.executor.memoryOverhead: Python workers (UDFs, mapPartitions, pandas), Arrow "
        "buffers, the JVM's own.",
        ("spark.executor.memoryOverhead", "spark.memory.offHeap.size", "spark.executor.memory"),
        f"raise spark.executor.memoryOverhead (now {overhead}), e.g. to {more}, for Python "
        f"and native memory; {off_heap}; spark.executor.memory (now {heap}) is the heap "
        "only: raise it for a Java OutOfMemoryError, not for this. "
        "Set them when the session is made: spark.stop(), then spark = SparkSession.builder"
        f".config('spark.executor.memoryOverhead', '{more}').getOrCreate(); or give each task "
        "less data (more, smaller partitions).",
    )


def _off_heap(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    enabled = conf.get("spark.memory.offHeap.enabled", "false")
    size = conf.get("spark.memory.offHeap.size", "0")
    if enabled.lower() != "true" and not re.search(r"Direct buffer memory|off-?heap", text, re.I):
        # Spark's execution memory on the heap ran out (the same error without off-heap).
        return _heap(text, conf, env)
    return Explanation(
        "Spark ran out of off-heap memory (memory outside the Java heap that Spark manages "
        "itself, or direct buffers).",
        ("spark.memory.offHeap.enabled", "spark.memory.offHeap.size"),
        f"with spark.memory.offHeap.enabled={enabled}, spark.memory.offHeap.size={size}: set "
        "spark.memory.offHeap.enabled=true and raise spark.memory.offHeap.size (e.g. 1g), or "
        "set spark.memory.offHeap.enabled=false to use the heap; on a cluster, the container "
        "must fit it too (spark.executor.memoryOverhead).",
    )


def _python_worker(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    limit = conf.get("spark.executor.pyspark.memory") or "unlimited"
    return Explanation(
        "a Python worker of a Spark task ran out of memory (MemoryError in a UDF, map or "
        "pandas function).",
        ("spark.executor.pyspark.memory", "spark.executor.memoryOverhead"),
        f"raise spark.executor.pyspark.memory (now {limit}) -- on a cluster it is part of "
        "the executor's spark.executor.memoryOverhead, raise that too -- or process smaller "
        "pieces per task (more partitions).",
    )


def _max_result(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    limit = _size(conf, "spark.driver.maxResultSize", "1g")
    return Explanation(
        "the result of collect()/toPandas() is larger than spark.driver.maxResultSize "
        f"({limit}), so Spark aborted the job to protect the driver.",
        ("spark.driver.maxResultSize", "spark.driver.memory"),
        "bring less data to the driver (.limit(n), .sample(), aggregate first, or write the "
        "result to the store with .write.parquet(...)); or raise spark.driver.maxResultSize "
        "(spark.stop(), then spark = SparkSession.builder.config("
        "'spark.driver.maxResultSize', '2g').getOrCreate()), keeping it below "
        "spark.driver.memory "
        f"({_size(conf, 'spark.driver.memory', '1g')}).",
    )


def _no_yarn_conf(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    given = ", ".join(
        f"{name}={env[name]}" for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if env.get(name)
    )
    return Explanation(
        "Spark cannot find the YARN cluster (spark.master is yarn): "
        + (
            f"no yarn-site.xml in {given}."
            if given
            else "HADOOP_CONF_DIR and YARN_CONF_DIR are unset."
        ),
        ("HADOOP_CONF_DIR", "YARN_CONF_DIR"),
        "ask the course's operators to set c.ScaleLabSpawner.hadoop_conf_dir to the cluster's "
        "client configuration folder (core-site.xml, hdfs-site.xml, yarn-site.xml); then "
        "restart your server.",
    )


def _stopped(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    return Explanation(
        "`spark` was stopped (spark.stop() or sc.stop()) earlier in this cell, so it cannot "
        "run anything.",
        ("spark",),
        "run the code again in a new cell: ScaleLab starts a new `spark` (and `sc`) with the "
        "course settings at its first use; or make one with your own settings: "
        "spark = SparkSession.builder.config(...).getOrCreate().",
    )


#: The namenode's reason in an ``AccessControlException`` (``Permission denied: user=alice,
#: access=WRITE, inode="/course/datasets":hdfs:supergroup:drwxr-xr-x``), up to its line's end.
_HDFS_REFUSAL = re.compile(r"Permission denied: user=[^\n]*?(?=\s+at |\n|$)")


def _hdfs_refused(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    found = _HDFS_REFUSAL.search(text)
    reason = found.group(0).strip() if found else "Permission denied"
    user = env.get("JUPYTERHUB_USER") or "<you>"
    return Explanation(
        f"HDFS refused it: {reason}. On the course store you may read datasets/ and your own "
        f"home, and write only in your home, home/{user}/.",
        ("the path written",),
        f"write under your home: store_url('home/{user}/...') (e.g. df.write.parquet("
        f"store_url('home/{user}/results'))); to change a data set, ask the course's staff.",
    )


#: Keys :func:`_session_conf` adds to the session's settings: what the running cluster offers
#: now (executors, not the driver, and their task slots: cores / ``spark.task.cpus``).
LIVE_EXECUTORS, LIVE_SLOTS = "scalelab.live.executors", "scalelab.live.slots"


def _barrier_slots(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    master = conf.get("spark.master", "?")
    slots, executors = conf.get(LIVE_SLOTS), conf.get(LIVE_EXECUTORS)
    now = (
        f" {master} offers {slots} task slot(s) now ({executors} executor(s))"
        if slots is not None
        else f" {master} has fewer"
    )
    return Explanation(
        "the job's barrier stage (TorchDistributor's num_processes ranks, or rdd.barrier()) "
        "needs all its tasks running at once, one task slot each, and" + now + ": it could "
        "never start.",
        ("num_processes", "spark.executor.instances", "spark.executor.cores"),
        f"ask for at most {slots or 'that many'} processes "
        "(TorchDistributor(num_processes=...)), or for more executors or cores "
        "(ops: c.ScaleLabSpawner.spark_conf); executors still starting count once registered.",
    )


def _barrier_dynamic(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    return Explanation(
        "distributed training (TorchDistributor's ranks, or rdd.barrier()) needs a fixed set of "
        "executors, and this kernel's Spark adds and removes executors as it goes (dynamic "
        "allocation): Spark refuses to start it.",
        ("spark.dynamicAllocation.enabled",),
        "start training in a kernel whose Spark has a fixed set: ops turn dynamic allocation "
        "off in c.ScaleLabSpawner.spark_conf, or set spark.dynamicAllocation.enabled = false "
        "in this notebook's own session before Spark starts.",
    )


#: TorchDistributor's own words when a rank's training function failed (the rank's traceback
#: stayed in its output), and the failed barrier task: ``ResultTask(<stage>, <partition>)``.
TORCH_FAILED = re.compile(
    r"TorchDistributor failed during training|torch_run_process_wrapper.*failed with return code",
    re.S,
)
_FAILED_TASK = re.compile(r"barrier task ResultTask\((\d+), (\d+)\) finished unsuccessfully")
#: What :func:`_explanation` adds to a TorchDistributor failure: where the failed task ran, and
#: each barrier task's last output lines (kept by :mod:`scalelab.kernels.torch_ranks`).
TASK_PLACE = "[barrier task {partition} ran in executor {executor} on {host}]"
_TASK_PLACE = re.compile(r"\[barrier task (\d+) ran in executor (\S+) on (\S+)\]")
OUTPUT_BEGIN, OUTPUT_END = "[TorchDistributor task output]", "[end of task output]"
#: Seconds to wait for the driver's UI to know where the failed barrier task ran: its listener
#: bus lagged the job's failure by more than 10 s on a busy 2-core CI host (the explanation then
#: lacked the executor). Waited only where the driver has a UI.
TASK_PLACE_WAIT_S = 30.0
#: Lines of the failed rank's traceback quoted.
RANK_LINES_SHOWN = 8


def _task_outputs(text: str) -> list[list[str]]:
    """The task outputs :func:`_explanation` appended to ``text``, one list of lines each."""
    outputs = []
    for block in text.split(OUTPUT_BEGIN)[1:]:
        outputs.append(block.split(OUTPUT_END, 1)[0].strip("\n").split("\n"))
    return outputs


def _rank_failed(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    from scalelab.kernels import torch_ranks

    task = _FAILED_TASK.search(text)
    partition = int(task.group(2)) if task else None
    outputs = _task_outputs(text)
    # The task Spark names may be a rank that only lost its peer; a rank is its task's index.
    partition = torch_ranks.culprit(outputs, partition)
    by_rank = {torch_ranks.rank_of(lines): lines for lines in outputs}
    lines = by_rank.get(partition)
    if lines is None:  # several processes a node: the output with a traceback of its own
        lines = next((o for o in outputs if any("Traceback" in x for x in o)), [])
    rank = torch_ranks.rank_of(lines)
    rank = partition if rank is None else rank
    places = {int(m.group(1)): (m.group(2), m.group(3)) for m in _TASK_PLACE.finditer(text)}
    executor, host = places.get(partition, ("?", "?")) if partition is not None else ("?", "?")
    if host == "?":
        host = torch_ranks.root_cause(lines).get("host", "?")
    trace = torch_ranks.exception_lines(lines, rank) if rank is not None else []
    if trace:
        why = trace[-1].strip()
        shown = torch_ranks.printed_before(lines, rank) + trace[-RANK_LINES_SHOWN:]
    else:
        code = torch_ranks.root_cause(lines).get("exitcode", "")
        why = f"its process ended with exit code {code}" if code else "see its last lines"
        if code.startswith("-9"):
            why += " (SIGKILL: often out of memory on its host)"
        shown = lines[-RANK_LINES_SHOWN:]
    who = f"rank {rank}" if rank is not None else "a rank"
    where = f" on {host}" if host != "?" else ""
    where = f" in executor {executor}{where}" if executor != "?" else where
    last = "\n".join(f"      {line}" for line in shown) if shown else "      (no output kept)"
    return Explanation(
        f"{who} of the TorchDistributor job failed{where}: {why}. The other ranks were "
        "stopped with it (a barrier stage ends as a whole).",
        ("the training function",),
        f"{who}'s last lines:\n{last}\n"
        "  fix the training function; to debug it, run it in one process first: "
        "TorchDistributor(num_processes=1, local_mode=True, use_gpu=False).run(train, ...). "
        "Every rank's output is above, in the cell.",
    )


def _tf_worker_failed(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    from scalelab.kernels.tf_distributor import parse_failure

    failure = parse_failure(text)
    assert failure is not None  # the rule's pattern matched
    lines = failure["lines"]
    start = max((i for i, x in enumerate(lines) if x.startswith("Traceback")), default=len(lines))
    shown = lines[max(0, start - 3) : start] + lines[start:][-RANK_LINES_SHOWN:]
    last = "\n".join(f"      {line}" for line in shown) if shown else "      (no output kept)"
    who = f"worker {failure['worker']} of {failure['workers']}"
    return Explanation(
        f"{who} of the TFDistributor job failed on {failure['host']}: {failure['why']}. The "
        "other workers were stopped with it (a barrier stage ends as a whole).",
        ("the training function",),
        f"worker {failure['worker']}'s last lines:\n{last}\n"
        "  fix the training function; to debug it, run it in one worker first: "
        "TFDistributor(num_workers=1).run(train, ...). Each worker's whole output is in its "
        "executor's log (the server's log view).",
    )


def _torch_gpus_unset(text: str, conf: Mapping[str, str], env: Mapping[str, str]) -> Explanation:
    gpus = conf.get("spark.task.resource.gpu.amount") or conf.get(
        "spark.driver.resource.gpu.amount"
    )
    return Explanation(
        "TorchDistributor asks for GPUs unless told otherwise (use_gpu=True is its default), "
        f"and this session gives its tasks {'no GPU' if not gpus else gpus + ' GPU(s)'} "
        "(spark.task.resource.gpu.amount is not set).",
        ("use_gpu", "spark.task.resource.gpu.amount"),
        "on CPUs, pass use_gpu=False: TorchDistributor(num_processes=2, local_mode=False, "
        "use_gpu=False); for GPUs, start your server with a GPU profile (its session then "
        "declares the GPUs it holds) or, on a cluster with GPU executors, ask ops for "
        "spark.executor.resource.gpu.amount and spark.task.resource.gpu.amount.",
    )


_Rule = Callable[[str, Mapping[str, str], Mapping[str, str]], Explanation]

#: (pattern over "<exception type>: <message>", explanation builder), first match wins.
RULES: tuple[tuple[re.Pattern[str], _Rule], ...] = (
    (TORCH_FAILED, _rank_failed),
    (re.compile(r"'spark\.task\.resource\.gpu\.amount' was unset"), _torch_gpus_unset),
    (re.compile(r"TensorFlow worker \d+ of \d+ on \S+ .*; its last lines:"), _tf_worker_failed),
    (
        re.compile(r"HADOOP_CONF_DIR (or|nor) YARN_CONF_DIR|no yarn-site\.xml in", re.I),
        _no_yarn_conf,
    ),
    # A driver that ended itself after an OutOfMemoryError, whatever the cell saw first (the
    # Java error's text, or a refused connection): one explanation.
    (re.compile(rf"\[driver JVM exited with code {SPARK_EXIT_OOM}\]"), _driver_gone),
    (re.compile(r"spark\.driver\.maxResultSize", re.I), _max_result),
    (re.compile(r"JAVA_GATEWAY_EXITED|Java gateway process exited|JAVA_HOME", re.I), _java_missing),
    (
        re.compile(
            r"memoryOverhead|exceeding (physical )?memory limits|Container killed"
            r"|beyond the 'PHYSICAL' memory limit"
            r"|exit(ed)? (with )?(code|status)( is|:)? ?(137|143)\b|OOMKilled",
            re.I,
        ),
        _overhead,
    ),
    (
        re.compile(
            r"off-?heap|Direct buffer memory|SparkOutOfMemoryError.*(Unable to acquire|"
            r"MemoryConsumer)",
            re.I | re.S,
        ),
        _off_heap,
    ),
    (
        re.compile(
            r"OutOfMemoryError|GC overhead limit exceeded|INVALID_DRIVER_MEMORY|"
            r"INVALID_EXECUTOR_MEMORY",
            re.I,
        ),
        _heap,
    ),
    (re.compile(r"PythonException.*\bMemoryError\b", re.S), _python_worker),
    (
        # PySpark's objects after stop(): their JVM handles are None.
        re.compile(
            r"^AttributeError\b[^\n]*: 'NoneType' object has no attribute "
            r"'(?:sc|_jsc|_jvm|_jsparkSession|_jconf)'[^\n]*\[[^\]\n]*\bpyspark\.",
            re.M,
        ),
        _stopped,
    ),
    (
        re.compile(
            # A Py4J call that lost its connection half-way raises a bare Py4JError with no
            # Java trace; the hook adds the driver's exit status when its process has ended.
            r"\[driver JVM exited with code -?\d+\]"
            r"|^Py4JError\b[^\n]*: An error occurred while calling [\w.]+ \["
            r"|Py4JNetworkError|Answer from Java side is empty|Error while (sending|receiving)"
            r"|ConnectionRefusedError.*py4j|py4j.*ConnectionRefusedError"
            rf"|{re.escape(TEXT_UNREACHABLE)}"
            r"|SparkContext (was|has been) shut ?down|stopped SparkContext"
            r"|return value of \"org\.apache\.spark\.SparkContext\.\w+\(\)\" is null",
            re.I | re.S | re.M,
        ),
        _driver_gone,
    ),
    (re.compile(r"AccessControlException|Permission denied: user="), _hdfs_refused),
    (re.compile(r"BarrierJobSlotsNumberCheckFailed|SPARK-24819"), _barrier_slots),
    (re.compile(r"BarrierJobRunWithDynamicAllocationException|SPARK-24942"), _barrier_dynamic),
)


def _message(exc: BaseException) -> str:
    """``str(exc)``, or its arguments when that fails.

    A ``Py4JJavaError`` asks the driver JVM for the Java exception's text in ``__str__``; with
    the JVM gone that raises ``ConnectionRefusedError``, which must not escape the hook.
    """
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 -- any failure: the plain arguments say enough
        return BaseException.__str__(exc)


def _text(exc: BaseException) -> str | None:
    """``str(exc)``, or None when that fails (a ``Py4JJavaError`` of a dead driver's)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 -- any failure: it cannot be shown as it is
        return None


def _frozen_str(self: BaseException) -> str:
    return self.__dict__["_shown_text"]


@functools.cache
def _shown_type(kind: type[BaseException], plain: bool = False) -> type[BaseException]:
    """A subclass of ``kind`` with its name and module whose ``__str__`` gives the text taken
    once (so ``isinstance`` and the type names ScaleLab's rules and the traceback's header
    read are ``kind``'s); with ``plain``, or where ``kind`` cannot be subclassed, a plain
    ``Exception`` of that name."""
    namespace = {"__str__": _frozen_str, "__module__": kind.__module__}
    namespace["__qualname__"] = kind.__qualname__
    if not plain:
        try:
            return type(kind.__name__, (kind,), namespace)
        except TypeError:  # a final class
            pass
    return type(kind.__name__, (Exception,), namespace)


def _frozen(exc: BaseException, text: str) -> BaseException:
    """A copy of ``exc`` whose text is ``text`` for good: ``exc``'s type (a subclass of it),
    arguments, traceback, cause and context; its ``__init__`` is not run."""
    try:
        shown = BaseException.__new__(_shown_type(type(exc)))
    except TypeError:  # a class with a __new__ of its own
        shown = BaseException.__new__(_shown_type(type(exc), plain=True))
    shown.args = exc.args
    shown.__dict__["_shown_text"] = text
    shown.__cause__, shown.__context__ = exc.__cause__, exc.__context__
    shown.__suppress_context__ = exc.__suppress_context__
    return shown.with_traceback(exc.__traceback__)


def _fixed(exc: BaseException) -> BaseException:
    """``exc`` when its text cannot change (Python's own ``__str__``), else a frozen copy with
    its text as it is now, or, when that fails, with its message as far as it is known without
    the driver (its ``errmsg``, else its arguments)."""
    if not isinstance(type(exc).__str__, types.FunctionType) or "_shown_text" in vars(exc):
        return exc  # a built-in __str__ (the text lives in the exception itself), or frozen
    text = _text(exc)
    if text is None:
        errmsg = getattr(exc, "errmsg", None)
        known = errmsg.strip() if isinstance(errmsg, str) and errmsg.strip() else _message(exc)
        text = f"{known} (the Java exception's text went with the driver JVM)"
    return _frozen(exc, text)


def printable(exc: BaseException) -> BaseException:
    """The exception to show for ``exc``: one whose text, and that of every exception of its
    chain (``__cause__``, ``__context__``), is taken once, now, and can always be shown.

    A ``Py4JJavaError`` asks the driver JVM for its Java exception's text in each ``__str__``
    (PySpark's ``CapturedException`` asks it for a setting); when the JVM dies (an
    OutOfMemoryError in local mode) that raises ``ConnectionRefusedError``, also between two
    looks at the same exception, and IPython and ipykernel, which turn the error and its chain
    into text several times, would unregister ScaleLab's handler. So each exception of the
    chain whose class writes its own ``__str__`` is replaced by a frozen copy with the same type
    name, traceback, cause and context (see :func:`_fixed`): at the top, a new one is returned;
    inside the chain (PySpark converting a Java error asks the dead JVM too, so the
    ``ConnectionRefusedError`` shown has the ``Py4JJavaError`` as its context), the link is
    replaced where it hangs. Exceptions with Python's own ``__str__`` are kept as they are.
    """
    top = _fixed(exc)
    seen: set[int] = set()
    pending = [top]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        suppress = node.__suppress_context__  # setting __cause__ would set it
        for attr in ("__cause__", "__context__"):
            link = getattr(node, attr)
            if link is None:
                continue
            shown = _fixed(link)
            if shown is not link:
                setattr(node, attr, shown)
            pending.append(shown)
        node.__suppress_context__ = suppress
    return top


def describe(exc: BaseException) -> str:
    """``"<type names>: <message>"`` of an exception and its causes, for :func:`explain`.

    The type names of the whole MRO are included (``Py4JNetworkError``, ``PythonException``),
    and for a ``ConnectionRefusedError`` raised inside py4j the traceback's module names, so
    an opaque "connection refused" from a dead driver can be told from any other. An exception
    whose text cannot be had (its ``__str__`` asks a driver that is gone) is given by its
    arguments and :data:`TEXT_UNREACHABLE`.
    """
    parts = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = " ".join(c.__name__ for c in type(current).__mro__)
        modules = []
        tb = current.__traceback__
        while tb is not None:
            modules.append(tb.tb_frame.f_globals.get("__name__", ""))
            tb = tb.tb_next
        text = _text(current)
        if text is None:  # its text needs the driver JVM, which does not answer
            text = f"{BaseException.__str__(current)} {TEXT_UNREACHABLE}"
        parts.append(f"{names}: {text} [{' '.join(dict.fromkeys(modules))}]")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def explain(
    description: str, conf: Mapping[str, str], environ: Mapping[str, str]
) -> Explanation | None:
    """The explanation of a failure, or None when it is not a Spark failure we know (pure).

    Parameters
    ----------
    description
        The exception as :func:`describe` gives it (type names, message, Java stack trace).
    conf
        The session's Spark settings (for the current values in the fix).
    environ
        The kernel's environment (``JAVA_HOME``).
    """
    for pattern, rule in RULES:
        if pattern.search(description):
            return rule(description, conf, environ)
    return None


def _session_conf(namespace: Mapping[str, Any]) -> dict[str, str]:
    conf: dict[str, str] = {
        "spark.master": os.environ.get(envvars.SPARK_MASTER) or DEFAULT_SPARK_MASTER,
        "spark.driver.memory": os.environ.get(envvars.SPARK_DRIVER_MEMORY) or "1g",
    }
    try:
        from pyspark import SparkContext

        active = SparkContext._active_spark_context
        if active is not None:
            conf.update(dict(active._conf.getAll()))
            conf.update(_live(active, conf))
    except Exception:  # noqa: BLE001 -- a dead JVM: the hub's settings are the best we have
        pass
    return conf


def _live(context: Any, conf: Mapping[str, str]) -> dict[str, str]:
    """What the cluster of ``context`` (a live SparkContext) offers now: its executors (the
    driver's own entry left out, unless local) and their task slots (Spark's own count for the
    barrier check; else ``defaultParallelism`` divided by ``spark.task.cpus``)."""
    jsc = context._jsc.sc()
    members = int(jsc.getExecutorMemoryStatus().size())
    local = str(conf.get("spark.master", "")).startswith("local")
    try:  # what the barrier check itself counts (the default resource profile's slots)
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        slots = int(jsc.maxNumConcurrentTasks(profile))
    except Exception:  # noqa: BLE001 -- another Spark: its parallelism, per task's cores
        slots = int(context.defaultParallelism) // max(1, int(conf.get("spark.task.cpus", "1")))
    return {
        LIVE_EXECUTORS: str(members if local else max(0, members - 1)),
        LIVE_SLOTS: str(slots),
    }


def driver_exit_status() -> int | None:
    """The exit status of this kernel's Spark driver JVM, or None while it runs (or never ran).

    Reads the ``Popen`` that PySpark keeps for the JVM it launched
    (``SparkContext._gateway.proc``); a negative status is the signal that killed it
    (``-9``: SIGKILL), :data:`SPARK_EXIT_OOM` a JVM that stopped after an OutOfMemoryError.
    """
    try:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None) if gateway is not None else None
        return proc.poll() if proc is not None else None
    except Exception:  # noqa: BLE001 -- no pyspark or no gateway: nothing known
        return None


#: Java frames kept at the head of each run of them in a shown trace; the rest are counted.
JAVA_FRAMES_KEPT = 5
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_JAVA_FRAME = re.compile(r"^\s*at [\w$.<>/-]+\(.*\)\s*$")


def fold_java_frames(text: str, keep: int = JAVA_FRAMES_KEPT) -> str:
    """``text`` (one part of a shown traceback) with each run of Java stack frames
    (``\tat org.apache.spark...(File.java:12)``) cut to its first ``keep`` lines and a line
    counting the rest (pure). Exception lines and ``Caused by:`` lines are all kept; a text
    without Java frames comes back as it was. Colour codes are looked through."""
    out: list[str] = []
    run = 0
    left_out = 0

    def close_run() -> None:
        nonlocal left_out
        if left_out:
            out.append(f"\t... {left_out} more Java frames left out (the driver's log has them)")
        left_out = 0

    for line in text.split("\n"):
        if _JAVA_FRAME.match(_ANSI.sub("", line)):
            run += 1
            if run <= keep:
                out.append(line)
            else:
                left_out += 1
            continue
        close_run()
        run = 0
        out.append(line)
    close_run()
    return "\n".join(out)


#: Seconds to wait, at most, for a driver whose connection broke (or that is stopping itself,
#: :data:`_MAY_END_THE_DRIVER`) to end, for its exit status: it runs Spark's shutdown hooks
#: first, on cores that may be busy (2 s until 2026-12-07; a margin, not a measured bound). A
#: driver that has ended is seen within 0.05 s.
DRIVER_EXIT_WAIT_S = 10.0


def _exit_status_within(seconds: float) -> int | None:
    """:func:`driver_exit_status`, waited for up to ``seconds`` (None: still running)."""
    deadline = time.monotonic() + seconds
    while True:
        status = driver_exit_status()
        if status is not None or time.monotonic() >= deadline:
            return status
        time.sleep(0.05)


class Py4JRootLines(logging.Filter):
    """Keeps py4j's tracebacks on the root logger out of the cell: its
    ``logging.exception("Exception while sending command.")`` when the driver's connection
    breaks, and ``"KeyboardInterrupt while sending command."`` when the student interrupts a
    Py4J call. The cell's own error says the same, explained, and ScaleLab's explanation must
    be the first thing under the cell (a 29-line dump came before it)."""

    MESSAGES = frozenset(
        ("Exception while sending command.", "KeyboardInterrupt while sending command.")
    )

    def filter(self, record: logging.LogRecord) -> bool:
        from_py4j = f"{os.sep}py4j{os.sep}" in record.pathname
        return not (from_py4j and record.getMessage() in self.MESSAGES)


def quiet_accumulator_servers() -> None:
    """Keep PySpark's accumulator servers from printing a traceback under the cell when the
    driver JVM drops their connection (it ended: an ``EOFError`` or ``ConnectionError`` in a
    request; socketserver's ``handle_error`` prints ~20 lines to stderr, from a thread, often
    before the cell's explanation). Other errors are printed as before. Idempotent."""
    try:
        from pyspark import accumulators
    except ImportError:
        return
    for server in (accumulators.AccumulatorTCPServer, accumulators.AccumulatorUnixServer):
        if getattr(server.handle_error, "scalelab_quiet", False):
            continue
        base = server.handle_error

        def handle_error(self: Any, request: Any, client_address: Any, base: Any = base) -> None:
            if isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
                return
            base(self, request, client_address)

        handle_error.scalelab_quiet = True  # type: ignore[attr-defined]
        server.handle_error = handle_error


def install(shell: Any, namespace: Mapping[str, Any]) -> None:
    """Show a known Spark failure's :class:`Explanation` first, then one short error output
    and the Python and Java traces (Java frames folded by :func:`fold_java_frames`) as one
    collapsed block (:mod:`scalelab.kernels.trace_block`); other errors are shown as IPython
    shows them.

    Parameters
    ----------
    shell
        The kernel's ``InteractiveShell``: its handler of the exceptions a Spark failure
        raises in a cell (``set_custom_exc``, for :func:`spark_exception_types`) becomes this
        one.
    namespace
        The notebook's globals.

    The cell's error that IPython's history and ipykernel's reply name
    (``ExecutionResult.error_in_exec``) becomes the copy shown, whose text cannot fail
    (:func:`printable`).
    """

    shown_for: dict[int, BaseException] = {}  # id(the cell's error) -> what was shown

    def stand_in(self: Any, value: BaseException, shown: BaseException) -> None:
        # The cell's error becomes ``shown`` now, in IPython's result of the cell too: IPython
        # turns that error into text for its history before post_run_cell, and a dead
        # driver's error raising there became a second error output and the reply's error.
        shown_for.clear()
        shown_for[id(value)] = shown
        result = getattr(self.displayhook, "exec_result", None)
        if result is not None and result.error_in_exec is value:
            result.error_in_exec = shown

    def handler(self: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None):
        interrupt = spark_interrupt.interrupt_in(value)
        if interrupt is not None:
            # A Py4J call cut by the student's interrupt (see interrupt_in): shown, and
            # replied, as the interrupt it is, not as a lost driver.
            stand_in(self, value, interrupt)
            self.showtraceback(
                (KeyboardInterrupt, interrupt, interrupt.__traceback__), tb_offset=tb_offset
            )
            return None
        # IPython and ipykernel turn the error into text several times; a handler that raises
        # is unregistered. The text is taken first, once (the JVM may die at any moment).
        shown = printable(value)
        stand_in(self, value, shown)
        try:
            explanation = _explanation(value, namespace)
        except Exception:  # noqa: BLE001 -- the cell's own error must stay the one shown
            explanation = None
        if explanation is None:
            self.showtraceback((etype, shown, tb), tb_offset=tb_offset, running_compiled_code=True)
            return None
        sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # for %debug
        print(explanation.text(), file=sys.stderr)
        sys.stderr.flush()  # before the error itself: the explanation comes first
        stb = self.InteractiveTB.structured_traceback(etype, shown, tb, tb_offset=tb_offset)
        # One short error output, then the traces as one folded block (trace_block).
        self._showtraceback(etype, shown, [trace_block.error_line(etype.__name__, str(shown))])
        bundle = trace_block.folded_block([fold_java_frames(part) for part in stb])
        self.display_pub.publish(data=bundle, metadata={})
        return None

    def hand_over_shown(result: Any) -> None:
        # ipykernel's execute reply takes str() of the cell's error once more, after the
        # cell: the frozen copy's text, not a dead driver's (which would fail the reply).
        error = getattr(result, "error_in_exec", None)
        if error is not None and id(error) in shown_for:
            result.error_in_exec = shown_for[id(error)]
        shown_for.clear()

    from scalelab.kernels import spark_interrupt, torch_ranks, trace_block

    torch_ranks.install()  # keeps what TorchDistributor's ranks print, for _rank_failed
    logging.getLogger().addFilter(Py4JRootLines())
    quiet_accumulator_servers()
    shell.set_custom_exc(spark_exception_types(), handler)
    shell.events.register("post_run_cell", hand_over_shown)


def spark_exception_types() -> tuple[type[BaseException], ...]:
    """The exception classes a Spark failure raises in a cell: py4j's ``Py4JError`` (a Java
    exception, a lost driver), PySpark's ``PySparkException``, :class:`SparkStartError`,
    ``ConnectionError`` (a dead driver's socket), ``AttributeError`` (a stopped session) and
    ``RuntimeError`` (TorchDistributor's own checks); any other error is shown as IPython shows
    it.
    Never ``SyntaxError``: IPython's own display of a cell that does not parse is kept."""
    from scalelab.kernels.spark_session import SparkStartError

    # RuntimeError: what pyspark's TorchDistributor raises for its own checks.
    found: list[type[BaseException]] = [
        SparkStartError,
        ConnectionError,
        AttributeError,
        RuntimeError,
    ]
    try:
        from py4j.protocol import Py4JError

        found.append(Py4JError)
    except ImportError:
        pass
    try:
        from pyspark.errors import PySparkException

        found.append(PySparkException)
    except ImportError:
        pass
    return tuple(found)


def _explanation(error: BaseException, namespace: Mapping[str, Any]) -> Explanation | None:
    """The explanation of ``error``, if it is a Spark failure we know."""
    description = describe(error)
    if "py4j" in description.lower():
        status = driver_exit_status()
        if status is None and (
            "Py4JJavaError" not in description
            or TEXT_UNREACHABLE in description
            or _MAY_END_THE_DRIVER.search(description)
        ):
            # The connection to the driver broke (no Java exception came back, or its text
            # could not be fetched), or the driver ran out of memory (in local mode Spark
            # then ends its JVM with exit code 52): its process may take a moment more to
            # end, and the explanation is the same whichever of these the cell saw first.
            status = _exit_status_within(DRIVER_EXIT_WAIT_S)
        if status is not None:
            description += f"\n[driver JVM exited with code {status}]"
    if TORCH_FAILED.search(description):
        description += _torch_context(description)
    return explain(description, _session_conf(namespace), os.environ)


def task_place_lines(places: Mapping[int, Mapping[str, str]]) -> list[str]:
    """``places`` (partition -> ``{"executor", "host", ...}``, from
    :func:`scalelab.kernels.torch_ranks.task_places`) as :data:`TASK_PLACE` lines, one per
    barrier task: every task, since the rank at fault may not be the task Spark names (a rank
    that only lost its peer can fail first)."""
    return [TASK_PLACE.format(partition=p, **places[p]) for p in sorted(places)]


def _torch_context(description: str) -> str:
    """What :func:`_rank_failed` reads beside the error: where each barrier task ran (the
    driver's UI REST API, once it knows the task Spark names) and each task's last output
    lines (TorchDistributor's log stream, kept by :mod:`scalelab.kernels.torch_ranks`)."""
    from scalelab.kernels import torch_ranks

    extra = []
    task = _FAILED_TASK.search(description)
    try:
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if task and context is not None and context.uiWebUrl:
            stage, partition = int(task.group(1)), int(task.group(2))
            # The UI's store learns of the failed task from Spark's listener bus, which may
            # lag the job's failure a little.
            deadline = time.monotonic() + TASK_PLACE_WAIT_S
            place = torch_ranks.task_places(context.uiWebUrl, context.applicationId, stage)
            while partition not in place and time.monotonic() < deadline:
                time.sleep(0.2)
                place = torch_ranks.task_places(context.uiWebUrl, context.applicationId, stage)
            extra.extend(task_place_lines(place))
    except Exception:  # noqa: BLE001 -- no UI, no driver: the output alone still says a lot
        pass
    for lines in torch_ranks.last_run():
        extra.append("\n".join([OUTPUT_BEGIN, *lines, OUTPUT_END]))
    return "".join(f"\n{part}" for part in extra)
