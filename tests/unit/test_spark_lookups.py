"""PySpark's own session lookups (``SparkSession.active()``, ``getActiveSession()``, called by
``TorchDistributor`` and other libraries) wait for the kernel's ``spark`` while it is built in
the background (pure: no JVM; the session is a stand-in that ``active()`` finds as PySpark's
instantiated session). ``tests/integration/spark/test_torch_distributor.py`` does it with a real
Spark."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from scalelab.kernels.spark_session import LazySparkSession, lookups_wait_for_the_kernels_session


@pytest.fixture
def slow_build(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[LazySparkSession, object, threading.Event]]:
    """A kernel's ``spark`` whose build finishes only once the event is set, what the build
    makes PySpark's instantiated session, and the event."""
    monkeypatch.setattr(SparkSession, "_instantiatedSession", None)
    made = SimpleNamespace(_sc=SimpleNamespace(_jsc=object()))
    go = threading.Event()

    def build() -> object:
        go.wait(60)
        SparkSession._instantiatedSession = made
        return made

    lazy = LazySparkSession(build)
    lookups_wait_for_the_kernels_session({"spark": lazy})
    yield lazy, made, go
    go.set()
    lazy.wait(60)


def test_active_waits_for_the_session_being_built(slow_build):
    lazy, made, go = slow_build
    threading.Timer(0.2, go.set).start()  # another thread lets the build finish
    assert not lazy.done()
    assert SparkSession.active() is made  # not "No active or default Spark session found"
    assert lazy.done()


def test_get_active_session_waits_too(slow_build):
    lazy, _made, go = slow_build
    threading.Timer(0.2, go.set).start()
    SparkSession.getActiveSession()  # None here: no JVM context; it waited all the same
    assert lazy.done()


def test_another_thread_does_not_wait(slow_build):
    """The background build itself looks sessions up: it must not wait for itself."""
    lazy, _made, _go = slow_build  # the build stays unfinished until the fixture's end
    found: list[object] = []

    def look() -> None:
        try:
            found.append(SparkSession.active())
        except PySparkRuntimeError as exc:
            found.append(exc)

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(60)
    assert isinstance(found[0], PySparkRuntimeError) and not lazy.done()


def test_a_stopped_sessions_stand_in_is_not_started_by_a_lookup(monkeypatch):
    monkeypatch.setattr(SparkSession, "_instantiatedSession", None)
    stand_in = LazySparkSession(lambda: pytest.fail("built by a lookup"), start=False)
    lookups_wait_for_the_kernels_session({"spark": stand_in})
    with pytest.raises(PySparkRuntimeError, match="NO_ACTIVE_OR_DEFAULT_SESSION"):
        SparkSession.active()
    assert not stand_in._started
