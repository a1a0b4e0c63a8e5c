"""A PySpark kernel's YARN application waiting for room (pure, and the stand-in's wait):
``scalelab.kernels.yarn_wait`` and ``LazySparkSession``'s ``waiting``. On the test cluster's
YARN: ``tests/integration/hadoop/test_yarn_wait.py``."""

from __future__ import annotations

import threading

import pytest

from scalelab.kernels import spark_session
from scalelab.kernels.spark_session import (
    LazySparkSession,
    is_stopped,
    renew_if_stopped,
    ui_start_race,
)
from scalelab.kernels.spark_yarn import kernel_tag, with_kernel_tag
from scalelab.kernels.yarn_wait import YarnWait, wait_report

TAG = kernel_tag(4242)
WAITING = {
    "id": "application_1_0009", "name": "scalelab-amy", "user": "amy", "queue": "default",
    "state": "ACCEPTED",
    "applicationTags": f"course,{TAG}", "allocatedMB": -1,
    "diagnostics": "[Sun Dec 06 03:25:41 +0000 2026] Application is added to the scheduler "
    "and is not yet activated. Queue's AM resource limit exceeded. Details : AM Partition = "
    "<DEFAULT_PARTITION>; AM Resource Request = <memory:768, vCores:1>; Queue Resource ",
}  # fmt: skip
MINE = {"id": "application_1_0002", "name": "scalelab-amy", "user": "amy", "allocatedMB": 3072,
        "elapsedTime": 25 * 60000, "applicationTags": kernel_tag(1)}  # fmt: skip
BOBS = {"id": "application_1_0003", "name": "scalelab-bob", "user": "bob", "allocatedMB": 4096,
        "elapsedTime": 60000}  # fmt: skip
METRICS = {"allocatedMB": 7168, "totalMB": 8192}


def test_the_report_names_the_students_own_applications_and_counts_the_others():
    text = wait_report(WAITING, [MINE, BOBS], METRICS, ["scalelab-amy"], 16.4)
    assert text.splitlines()[0] == (
        "ScaleLab: your Spark application application_1_0009 has waited 16 s for room in YARN "
        "queue 'default' (state ACCEPTED: Application is added to the scheduler and is not yet "
        "activated. Queue's AM resource limit exceeded.)."
    )
    assert "The cluster's containers hold 7,168 of 8,192 MB:" in text
    assert "  - yours: application_1_0002 (3,072 MB, running 25 min)" in text
    assert "  - others: 1 application(s) of 1 user(s), 4,096 MB" in text
    assert "shut down the kernels of your other PySpark notebooks" in text
    assert "interrupt the kernel: ScaleLab then cancels it" in text
    others_only = wait_report(WAITING, [BOBS], {}, ["scalelab-amy"], 20)
    assert "yours" not in others_only and "held by others' work" in others_only
    assert "containers hold" not in others_only  # no metrics, no figure


def test_the_kernel_tag_is_added_to_the_tags_ops_set():
    assert TAG.startswith("scalelab-kernel-") and TAG.endswith("-4242") and TAG == TAG.lower()
    assert with_kernel_tag("", TAG) == TAG
    assert with_kernel_tag("course,  , team-a", TAG) == f"course,team-a,{TAG}"
    assert with_kernel_tag(f"{TAG},course", TAG) == f"course,{TAG}"


class FakeRM:
    """The ResourceManager's REST answers (no YARN here; the real one: the integration test)."""

    def __init__(self) -> None:
        self.pending = [WAITING, {**WAITING, "id": "application_1_0010", "applicationTags": "x"}]
        self.killed: list[str] = []

    def get(self, url: str) -> dict:
        if url.endswith("/metrics"):
            return {"clusterMetrics": METRICS}
        if "states=RUNNING,ACCEPTED" in url:
            return {"apps": {"app": [MINE, BOBS, WAITING]}}
        return {"apps": {"app": self.pending} if self.pending else None}

    def put(self, url: str, body: dict, user: str) -> None:
        assert body == {"state": "KILLED"} and user == "amy"  # the application's own user
        self.killed.append(url.split("/apps/")[1].split("/")[0])


def test_the_notice_waits_its_time_and_tells_of_this_kernels_application_only():
    rm, printed = FakeRM(), []
    wait = YarnWait("rm:8088", "scalelab-amy", TAG, 15, rm.get, rm.put, printed.append)
    assert wait.notice(14.9) is False and printed == []
    assert wait.notice(15.2) is True
    assert "application_1_0009" in printed[0] and "application_1_0010" not in printed[0]
    assert "others: 1 application(s)" in printed[0]  # bob's; the waiting one holds nothing
    rm.pending = []
    assert wait.notice(30) is False  # started meanwhile: nothing to say
    # Its application master has a container: starting slowly on a busy cluster, not queued.
    rm.pending = [{**WAITING, "allocatedMB": 768, "diagnostics": "AM container is launched, "
                   "waiting for AM container to Register with RM"}]  # fmt: skip
    fresh = YarnWait("rm:8088", "scalelab-amy", TAG, 15, rm.get, rm.put, printed.append)
    assert fresh.notice(40) is False and len(printed) == 1
    down = YarnWait("rm:8088", "scalelab-amy", TAG, 0, _refused, rm.put, printed.append)
    assert down.notice(99) is False and len(printed) == 1


def _refused(_url: str) -> dict:
    raise ConnectionError("[Errno 111] Connection refused")


def test_cancel_kills_this_kernels_waiting_application_only():
    rm, printed = FakeRM(), []
    wait = YarnWait("rm:8088", "scalelab-amy", TAG, 15, rm.get, rm.put, printed.append)
    assert wait.cancel() == ["application_1_0009"] and rm.killed == ["application_1_0009"]
    assert printed == [
        "ScaleLab: cancelled the waiting Spark application application_1_0009; the next use "
        "of spark starts a new one."
    ]


class Watcher:
    def __init__(self, interrupt_after: int) -> None:
        self.calls: list[float] = []
        self.interrupt_after = interrupt_after
        self.cancels = 0

    def notice(self, waited_s: float) -> bool:
        self.calls.append(waited_s)
        if len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt  # as the kernel's interrupt comes during the wait
        return False

    def cancel(self) -> list[str]:
        self.cancels += 1
        return ["application_1_0009"]


def test_an_interrupted_wait_cancels_the_start_and_the_next_cell_gets_a_new_stand_in(monkeypatch):
    monkeypatch.setattr(spark_session, "WAIT_STEP_S", 0.05)
    monkeypatch.setattr(spark_session, "CANCEL_WAIT_S", 5)
    release = threading.Event()

    def factory() -> object:  # Spark's start: ends (failing) once its application is killed
        release.wait(10)
        raise RuntimeError("Yarn application has already ended! It might have been killed")

    watcher = Watcher(interrupt_after=3)
    lazy = LazySparkSession(factory, waiting=watcher)
    threading.Timer(0.5, release.set).start()  # the kill reaches Spark a moment later
    with pytest.raises(KeyboardInterrupt):
        lazy.wait()
    assert len(watcher.calls) == 3 and watcher.calls == sorted(watcher.calls)
    assert watcher.cancels == 1 and lazy.cancelled and lazy.done()  # waited for the start's end
    assert is_stopped(lazy)
    namespace = {"spark": lazy}
    renewed = renew_if_stopped(namespace, lambda: "new session", watcher)
    assert namespace["spark"] is renewed and renewed.waiting is watcher
    assert renewed.wait() == "new session" and not renewed.cancelled


def test_a_start_that_ends_in_time_is_never_noticed_nor_cancelled(monkeypatch):
    monkeypatch.setattr(spark_session, "WAIT_STEP_S", 0.05)
    watcher = Watcher(interrupt_after=99)
    lazy = LazySparkSession(lambda: "session", waiting=watcher)
    assert lazy.wait() == "session" and watcher.cancels == 0 and not lazy.cancelled
    assert not is_stopped(lazy)


def test_sparks_ui_race_on_yarn_is_recognised_and_nothing_else():
    """The error a CI run met (Spark 4.3 on YARN, the test cluster), first lines as Py4J gives
    them: it is tried once more; other failed starts are not."""
    met = (
        "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
        ": java.util.ConcurrentModificationException\n"
        "\tat java.base/java.util.ArrayList$ArrayListSpliterator.forEachRemaining(...)\n"
        "\tat org.sparkproject.jetty.ee10.servlet.ServletHandler.initialize(...)\n"
        "\tat org.apache.spark.ui.SparkUI.attachAllHandlers(SparkUI.scala:82)\n"
    )
    assert ui_start_race(met)
    assert not ui_start_race("java.util.ConcurrentModificationException\n\tat HashMap.forEach")
    assert not ui_start_race("Yarn application has already ended! It might have been killed")
