"""A stopped ``spark`` is replaced by a stand-in that builds a new session at its first use
(issue 13), and only then: a student who stopped it to make their own gets theirs (pure; the
kernel test in tests/integration/spark/test_spark_kernel.py does it with a real Spark)."""

from __future__ import annotations

from types import SimpleNamespace

from pyspark.sql import SparkSession

from scalelab.kernels.spark_session import (
    LazySparkContext,
    LazySparkSession,
    is_stopped,
    renew_if_stopped,
)


def _session(stopped: bool) -> SparkSession:
    """A SparkSession object without a JVM: only what is_stopped reads (its context's _jsc)."""
    session = SparkSession.__new__(SparkSession)
    session._sc = SimpleNamespace(_jsc=None if stopped else object())
    return session


def test_only_a_stopped_spark_session_counts_as_stopped():
    assert is_stopped(_session(stopped=True))
    assert not is_stopped(_session(stopped=False))
    assert not is_stopped(None) and not is_stopped("spark")
    built = LazySparkSession(lambda: _session(stopped=True))
    built.wait(timeout=10)
    assert is_stopped(built)
    assert not is_stopped(LazySparkSession(lambda: _session(stopped=True), start=False))


def test_a_stopped_spark_gets_a_stand_in_that_builds_only_when_touched():
    old = _session(stopped=True)
    calls: list[int] = []
    namespace = {"spark": old, "sc": old._sc}

    def factory() -> SparkSession:
        calls.append(1)
        return _session(stopped=False)

    renewed = renew_if_stopped(namespace, factory)
    assert renewed is namespace["spark"] and isinstance(namespace["sc"], LazySparkContext)
    assert calls == [] and "touching `spark` starts a new one" in repr(renewed)
    assert "touching `sc` starts a new one" in repr(namespace["sc"])
    assert not is_stopped(renewed.wait(timeout=10))
    assert calls == [1]
    assert renew_if_stopped(namespace, factory) is None  # the new one runs: nothing to do


def test_a_running_or_rebound_spark_is_left_alone():
    running = _session(stopped=False)
    namespace = {"spark": running, "sc": "mine"}
    assert renew_if_stopped(namespace, lambda: None) is None
    assert namespace == {"spark": running, "sc": "mine"}
    stopped = {"spark": _session(stopped=True), "sc": "mine"}
    renew_if_stopped(stopped, lambda: None)
    assert stopped["sc"] == "mine"  # the student's own `sc` is theirs
