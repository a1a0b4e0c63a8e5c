"""Executor GPUs of Spark applications on a cluster, within the course's GPU limits (pure logic).

The per-application limit (a dated one: "at most 4 GPUs per application from a day"), the
per-user limit counted with the servers' GPUs, the hub's registry of grants, the request's
shape, and how a kernel counts the GPUs its session asks for. The real hub's answers are in
``tests/integration/spark/test_spark_gpus_hub.py``.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from traitlets import TraitError

from scalelab.hub_ext.hub.spark_gpus import parse_grant
from scalelab.kernels.spark_errors import explain
from scalelab.kernels.spark_gpu_grant import (
    ExecutorGPUsRefused,
    claim,
    executor_gpus,
    is_cluster,
    refusal,
)
from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.policy import PolicyError, check_application, effective_limits
from scalelab.spawner.spark_grants import (
    MAX_APPLICATIONS_PER_SERVER,
    GrantError,
    SparkGrant,
    SparkGrants,
)
from tests.unit.test_gpu_policy import _policy

WEEK_AGO = dt.date(2026, 11, 27)


COURSE = _policy(
    max_gpus_per_user=6,
    group_limits={"ml-course": {"max_gpus_per_application": 2}},
    dated_limits=[{"from": WEEK_AGO.isoformat(), "max_gpus_per_application": 4}],
)


@pytest.mark.parametrize(
    ("groups", "today", "per_application"),
    [
        ([], WEEK_AGO - dt.timedelta(days=1), None),  # before the dated limit: none of its own
        ([], WEEK_AGO, 4),  # from its day on
        (["ml-course"], WEEK_AGO, 2),  # the smallest that applies
        (["ml-course"], WEEK_AGO - dt.timedelta(days=1), 2),
    ],
)
def test_the_per_application_limit_is_the_smallest_that_applies(groups, today, per_application):
    limits = effective_limits(COURSE.rules(), groups, today)
    assert limits.per_application == per_application
    assert limits.per_user == 6
    assert effective_limits(COURSE.rules(), groups, today, exempt=True).per_application is None


def test_an_application_over_its_dated_limit_is_refused_with_the_limit_and_the_fix():
    limits = effective_limits(COURSE.rules(), [], WEEK_AGO)
    check_application(4, limits, held_by_user=0)
    with pytest.raises(PolicyError) as refused:
        check_application(5, limits, held_by_user=0)
    assert refused.value.status == 400
    message = str(refused.value)
    assert f"at most 4 (limit from {WEEK_AGO})" in message
    assert "spark.executor.instances" in message


def test_the_per_user_limit_counts_what_the_servers_and_other_applications_hold():
    limits = effective_limits(COURSE.rules(), [], WEEK_AGO)
    check_application(2, limits, held_by_user=4)
    with pytest.raises(PolicyError) as refused:
        check_application(3, limits, held_by_user=4)
    assert refused.value.status == 409
    assert "would give you 7, but you may hold at most 6" in str(refused.value)
    assert "hold 4" in str(refused.value)


def test_a_bad_per_application_limit_is_an_error_at_start():
    assert _policy().max_gpus_per_application is None
    with pytest.raises(TraitError, match="max_gpus_per_application must be a whole number"):
        _policy(dated_limits=[{"from": "2027-01-01", "max_gpus_per_application": -1}])
    with pytest.raises(TraitError):
        _policy(max_gpus_per_application=-1)
    rules = _policy(max_gpus_per_application=3).rules()
    assert effective_limits(rules, [], WEEK_AGO).per_application == 3


def test_the_registry_replaces_an_applications_grant_and_releases_by_server():
    grants = SparkGrants()
    assert grants.put(SparkGrant("alice/", "alice", "a", 2, 1.0)) is None
    assert grants.put(SparkGrant("alice/", "alice", "a", 3, 2.0)).gpus == 2  # replaced
    grants.put(SparkGrant("alice/gpu", "alice", "b", 1, 3.0))
    grants.put(SparkGrant("bob/", "bob", "a", 4, 4.0))
    assert grants.held_by_user("alice") == 4
    assert [g.application for g in grants.release("alice/", "a")] == ["a"]
    assert grants.held_by_user("alice") == 1
    assert grants.release("alice/", "a") == []
    assert [g.server for g in grants.release("bob/")] == ["bob/"]
    assert grants.held_by_user("bob") == 0
    for index in range(MAX_APPLICATIONS_PER_SERVER - 1):
        grants.put(SparkGrant("alice/gpu", "alice", f"app-{index}", 1, 5.0))
    with pytest.raises(GrantError, match="stop one"):
        grants.put(SparkGrant("alice/gpu", "alice", "one-more", 1, 6.0))


def test_the_allocator_counts_grants_with_the_servers_gpus_both_ways():
    async def scenario() -> None:
        now = dt.datetime(2026, 12, 4, 12).timestamp()
        allocator = GPUAllocator([f"GPU-{i}" for i in range(4)], COURSE.rules(), clock=lambda: now)
        await allocator.acquire("alice/", "alice", 1)
        grant = await allocator.grant_spark("alice/", "alice", "train", 4)
        assert (grant.gpus, grant.since) == (4, now)
        # a new grant for the same application replaces it: 1 + 5 would be 6, but 5 > 4
        with pytest.raises(PolicyError) as over:
            await allocator.grant_spark("alice/", "alice", "train", 5)
        assert over.value.status == 400
        await allocator.grant_spark("alice/", "alice", "train", 3)
        with pytest.raises(PolicyError) as full:
            await allocator.grant_spark("alice/", "alice", "search", 3)
        assert full.value.status == 409
        # a server's request counts the applications' GPUs: 1 + 3 + 2 fits 6, 1 + 3 + 3 not
        allocator.check("alice/second", "alice", 2)
        with pytest.raises(PolicyError, match="hold at most 6"):
            allocator.check("alice/second", "alice", 3)
        assert allocator.spark.release("alice/")[0].application == "train"
        allocator.check("alice/second", "alice", 2)

    asyncio.run(scenario())


def test_a_request_is_read_strictly():
    assert parse_grant({"server": "", "application": "app", "gpus": 4}) == ("", "app", 4)
    for bad, message in [
        ({"application": "app", "gpus": 0}, "from 1 to"),
        ({"application": "app", "gpus": True}, "whole number"),
        ({"application": "", "gpus": 1}, "'application'"),
        ({"server": 1, "application": "a", "gpus": 1}, "'server'"),
        ({"application": "a", "gpus": 1, "extra": 1}, "a request is"),
        (None, "a request is"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_grant(bad)


@pytest.mark.parametrize(
    ("conf", "gpus"),
    [
        ({"spark.master": "spark://h:7077"}, 0),
        ({"spark.executor.resource.gpu.amount": "0", "spark.executor.instances": "8"}, 0),
        ({"spark.executor.resource.gpu.amount": "1", "spark.executor.instances": "5"}, 5),
        (
            {
                "spark.executor.resource.gpu.amount": "2",
                "spark.executor.instances": "9",
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.maxExecutors": "3",
            },
            6,
        ),
        (
            {
                "spark.master": "spark://h:7077",
                "spark.executor.resource.gpu.amount": "1",
                "spark.cores.max": "8",
                "spark.executor.cores": "2",
            },
            4,
        ),
        ({"spark.master": "yarn", "spark.executor.resource.gpu.amount": "1"}, 2),
    ],
)
def test_a_session_asks_for_gpus_per_executor_times_its_executors(conf, gpus):
    assert executor_gpus(conf)[0] == gpus


def test_executors_that_cannot_be_counted_are_refused_naming_the_setting():
    gpu = {"spark.executor.resource.gpu.amount": "1"}
    for conf, setting in [
        ({**gpu, "spark.dynamicAllocation.enabled": "true"}, "maxExecutors"),
        ({**gpu, "spark.master": "spark://h:7077"}, "spark.executor.instances"),
        ({"spark.executor.resource.gpu.amount": "one"}, "not a whole number"),
    ]:
        with pytest.raises(ExecutorGPUsRefused, match=setting):
            executor_gpus(conf)


def test_only_a_cluster_session_with_executor_gpus_under_a_hub_asks():
    assert is_cluster("spark://h:7077") and is_cluster("yarn")
    assert not is_cluster("local[2]")
    cluster = {
        "spark.master": "yarn",
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.instances": "5",
    }
    hub = {"JUPYTERHUB_API_URL": "http://127.0.0.1:1/hub/api", "JUPYTERHUB_API_TOKEN": "t"}
    assert claim({**cluster, "spark.master": "local[2]"}, hub) is None
    assert claim(cluster, {}) is None  # no hub: no course limits to check
    # a hub that cannot be reached (port 1): refused, saying so, not hung
    with pytest.raises(ExecutorGPUsRefused, match="could not be reached"):
        claim(cluster, {**hub, "JUPYTERHUB_USER": "alice"})


def test_the_refusal_is_one_paragraph_with_the_numbers_and_the_hubs_reason():
    text = refusal(5, "spark.executor.resource.gpu.amount=1 x spark.executor.instances=5", 400, "x")
    assert "\n" not in text
    assert text.startswith("ScaleLab did not start Spark: your session asks the cluster for 5")
    assert text.endswith("(HTTP 400): x")
    # shown as it is: no Spark failure rule (a driver out of memory...) claims it
    unreachable = "SparkStartError: ScaleLab did not start Spark: ... could not be reached "
    for shown in (f"SparkStartError: {text}", unreachable + "(<urlopen error [Errno 111]>)"):
        assert explain(shown, {}, {}) is None
