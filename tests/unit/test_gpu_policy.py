"""Table tests of GPU limits: per server, per user, per group, from a date; typed configuration."""

from __future__ import annotations

import datetime as dt

import pytest
from traitlets import TraitError
from traitlets.config import Config

from scalelab.common.strictconfig import UnknownSettingError
from scalelab.spawner.policy import GPUPolicy, PolicyError, check_request, effective_limits

DEADLINE = dt.date(2027, 5, 20)


def _policy(**settings) -> GPUPolicy:
    c = Config()
    for key, value in settings.items():
        setattr(c.GPUPolicy, key, value)
    return GPUPolicy(config=c)


COURSE = _policy(
    max_gpus_per_server=4,
    max_gpus_per_user=4,
    group_limits={"ml-course": {"max_gpus_per_user": 2}},
    dated_limits=[{"from": "2027-05-20", "max_gpus_per_server": 1, "max_gpus_per_user": 2}],
)


@pytest.mark.parametrize(
    ("groups", "today", "exempt", "per_server", "per_user"),
    [
        ([], DEADLINE - dt.timedelta(days=1), False, 4, 4),
        (["ml-course"], DEADLINE - dt.timedelta(days=1), False, 4, 2),
        ([], DEADLINE, False, 1, 2),  # the dated limit starts on its day
        (["ml-course"], DEADLINE + dt.timedelta(days=9), False, 1, 2),
        (["ml-course"], DEADLINE, True, None, None),  # exempt admins
    ],
)
def test_effective_limits_take_the_smallest_applicable(groups, today, exempt, per_server, per_user):
    limits = effective_limits(COURSE.rules(), groups, today, exempt)
    assert (limits.per_server, limits.per_user) == (per_server, per_user)


def test_dated_limit_for_one_group_only():
    policy = _policy(
        dated_limits=[{"from": "2027-05-20", "groups": ["ml-course"], "max_gpus_per_user": 1}]
    )
    assert effective_limits(policy.rules(), ["ml-course"], DEADLINE).per_user == 1
    assert effective_limits(policy.rules(), ["other"], DEADLINE).per_user == 4


@pytest.mark.parametrize(
    ("gpus", "held", "status", "message"),
    [
        (2, 0, 400, r"a server may have at most 1 \(limit from 2027-05-20\)"),
        (1, 2, 409, r"you may hold at most 2 \(limit from 2027-05-20\); your other servers hold 2"),
    ],
)
def test_requests_over_a_limit_are_refused_with_the_rule_named(gpus, held, status, message):
    limits = effective_limits(COURSE.rules(), [], DEADLINE)
    with pytest.raises(PolicyError, match=message) as info:
        check_request(gpus, limits, held)
    assert info.value.status == status


def test_requests_within_limits_pass():
    limits = effective_limits(COURSE.rules(), [], DEADLINE)
    check_request(1, limits, held_by_user=1)
    check_request(0, limits, held_by_user=2)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"group_limits": {"ml": {"max_gpu_per_user": 2}}},
            r"unknown key\(s\) \['max_gpu_per_user'\]",
        ),
        ({"group_limits": {"ml": {"max_gpus_per_user": -1}}}, "must be a whole number >= 0"),
        ({"group_limits": {"ml": 2}}, "must be a dict of limits"),
        (
            {"dated_limits": [{"from": "20/05/2027", "max_gpus_per_user": 1}]},
            "'from' must be a date",
        ),
        ({"dated_limits": [{"max_gpus_per_user": 1}]}, "'from' must be a date"),
        ({"dated_limits": [{"from": "2027-05-20", "groups": "ml"}]}, "'groups' must be a list"),
        ({"max_gpus_per_user": -2}, "max_gpus_per_user"),
        ({"max_gpu_per_user": 2}, r"c.GPUPolicy has unknown setting\(s\) \['max_gpu_per_user'\]"),
    ],
)
def test_misspelt_or_bad_configuration_is_an_error_at_start(settings, message):
    with pytest.raises(TraitError, match=message):
        _policy(**settings)


def test_a_misspelt_setting_is_the_one_strict_config_message():
    with pytest.raises(UnknownSettingError) as caught:
        _policy(max_gpu_per_user=2)
    assert str(caught.value) == (
        "c.GPUPolicy has unknown setting(s) ['max_gpu_per_user'] "
        "(did you mean 'max_gpu_per_user' -> 'max_gpus_per_user'?)"
    )
