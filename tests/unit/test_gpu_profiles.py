"""Untrusted user_options against the configured profiles: bad input named, defaults filled."""

from __future__ import annotations

import pytest

from scalelab.spawner.profiles import (
    OptionsError,
    ProfileForbidden,
    check_memory_choices,
    check_profile_access,
    options_from_form,
    parse_user_options,
    profiles_from_config,
)

PROFILES = profiles_from_config(
    [
        {"slug": "cpu", "display_name": "CPU only", "default": True},
        {"slug": "gpu-1", "display_name": "1 GPU", "gpus": 1},
        {"slug": "gpu-2", "display_name": "2 GPUs", "gpus": 2},
    ]
)
MEMORY = ["1g", "2g", "4g"]


@pytest.mark.parametrize(
    ("options", "profile", "gpus", "memory"),
    [
        (None, "cpu", 0, "1g"),
        ({}, "cpu", 0, "1g"),
        ({"profile": "gpu-2"}, "gpu-2", 2, "1g"),
        ({"profile": "gpu-2", "gpus": 1, "spark_driver_memory": "4g"}, "gpu-2", 1, "4g"),
    ],
)
def test_accepted_options_and_defaults(options, profile, gpus, memory):
    request = parse_user_options(options, PROFILES, MEMORY)
    assert (request.profile.slug, request.gpus, request.spark_driver_memory) == (
        profile,
        gpus,
        memory,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gpus": -1}, r"'gpus' must be between 0 and 0 for profile 'cpu', not -1"),
        ({"profile": "gpu-2", "gpus": 99}, r"between 0 and 2 for profile 'gpu-2', not 99"),
        ({"profile": "gpu-1", "gpus": "x"}, r"'gpus' must be a whole number, not 'x'"),
        ({"profile": "gpu-1", "gpus": True}, r"'gpus' must be a whole number, not True"),
        ({"profile": "gpu-1", "gpus": 1.5}, r"'gpus' must be a whole number, not 1.5"),
        ({"profile": "a100-8"}, r"unknown profile 'a100-8'; offered: cpu, gpu-1, gpu-2"),
        ({"profile": ["gpu-1"]}, r"unknown profile \['gpu-1'\]"),
        ({"gpu": 1}, r"unknown option\(s\) \['gpu'\]"),
        ({"spark_driver_memory": "64g"}, r"must be one of 1g, 2g, 4g, not '64g'"),
        ({"profile": "gpu-1", "gpus": "1"}, r"'gpus' must be a whole number, not '1'"),
        ({"profile": "x" * 10_000_000}, r"^unknown profile 'x{15,20}\.\.\.x{15,20}'; offered"),
        ({"x" * 10_000: 1}, r"^unknown option\(s\) \['x{10,20}\.\.\.x{10,20}'\]"),
    ],
)
def test_tampered_options_are_refused_with_the_problem_named(options, message):
    with pytest.raises(OptionsError, match=message):
        parse_user_options(options, PROFILES, MEMORY)


def test_form_fields_become_options_without_the_xsrf_token():
    form = {"profile": ["gpu-1"], "spark_driver_memory": ["2g"], "_xsrf": ["t"]}
    assert options_from_form(form) == {"profile": "gpu-1", "spark_driver_memory": "2g"}


def test_a_form_gpu_count_is_a_number_and_one_the_profile_lacks_is_refused_as_such():
    """A newcomer's tampered form: gpus=3 on the CPU profile was refused as 'must be a whole
    number, not '3''; the form's strings of digits are numbers."""
    assert options_from_form({"profile": ["gpu-2"], "gpus": [" 1 "]})["gpus"] == 1
    with pytest.raises(OptionsError, match=r"between 0 and 0 for profile 'cpu', not 3"):
        parse_user_options(options_from_form({"profile": ["cpu"], "gpus": ["3"]}), PROFILES, MEMORY)
    zero = parse_user_options(
        options_from_form({"profile": ["cpu"], "gpus": ["0"]}), PROFILES, MEMORY
    )
    assert zero.gpus == 0
    for odd in ("1.5", "-1", "x", "9" * 50):
        with pytest.raises(OptionsError, match="'gpus' must be a whole number"):
            parse_user_options(options_from_form({"gpus": [odd]}), PROFILES, MEMORY)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "empty"),
        ([{"slug": "cpu", "gpu": 1}], r"unknown key\(s\) \['gpu'\]"),
        ([{"slug": "CPU!"}], "'slug' must be lowercase"),
        ([{"slug": "g", "gpus": -1}], "'gpus' must be a whole number >= 0"),
        ([{"slug": "a"}, {"slug": "a"}], "a slug is used twice"),
        ([{"slug": "a", "default": True}, {"slug": "b", "default": True}], "more than one"),
        ([{"slug": "a"}, {"slug": "g", "groups": "research"}], "'groups' must be a list"),
        ([{"slug": "a"}, {"slug": "g", "groups": [""]}], "'groups' must be a list"),
        ([{"slug": "g", "groups": ["research"]}], "every profile is kept for some groups"),
        (
            [{"slug": "a"}, {"slug": "g", "groups": ["r"], "default": True}],
            "the default profile is kept for some groups",
        ),
    ],
)
def test_bad_profile_configuration_is_refused(entries, message):
    with pytest.raises(ValueError, match=message):
        profiles_from_config(entries)


def test_a_profile_may_set_its_servers_memory_and_cpus():
    cpu, big = profiles_from_config(
        [{"slug": "cpu"}, {"slug": "big", "mem_limit": "1.5G", "cpu_limit": 2}]
    )
    assert (cpu.mem_limit, cpu.cpu_limit) == (None, None)  # the spawner's own
    assert (big.mem_limit, big.cpu_limit) == (1536 * 2**20, 2.0)
    [raw] = profiles_from_config([{"slug": "raw", "mem_limit": 10**9, "cpu_limit": 0.5}])
    assert (raw.mem_limit, raw.cpu_limit) == (10**9, 0.5)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"mem_limit": "8GB"}, "'mem_limit' must be a size like \"8G\""),
        ({"mem_limit": 0}, "'mem_limit' must be a size"),
        ({"mem_limit": -5}, "above 0, not -5"),
        ({"mem_limit": True}, "'mem_limit' must be a size"),
        ({"mem_limit": [8]}, "'mem_limit' must be a size"),
        ({"cpu_limit": "2"}, "'cpu_limit' must be a number of CPUs above 0"),
        ({"cpu_limit": 0}, "'cpu_limit' must be a number of CPUs above 0"),
        ({"cpu_limit": True}, "not True"),
    ],
)
def test_a_bad_profile_limit_names_the_profile_and_the_form(entry, message):
    with pytest.raises(ValueError, match=message) as caught:
        profiles_from_config([{"slug": "cpu"}, {"slug": "big", **entry}])
    assert str(caught.value).startswith("ScaleLabSpawner.profiles[1]: ")


def test_memory_choices_must_be_jvm_sizes():
    assert check_memory_choices(["512m", "2g"]) == ["512m", "2g"]
    with pytest.raises(ValueError, match="sizes like"):
        check_memory_choices(["2 GB"])


def test_a_group_profile_is_open_to_its_groups_members_only():
    profiles = profiles_from_config(
        [{"slug": "cpu"}, {"slug": "gpu-4", "gpus": 4, "groups": ["research", "staff"]}]
    )
    gpu4 = profiles[1]
    assert gpu4.open_to(["staff"]) and not gpu4.open_to(["course"]) and profiles[0].open_to([])
    check_profile_access({"profile": "gpu-4"}, profiles, ["course", "research"])  # a member
    check_profile_access({"profile": "cpu"}, profiles, [])
    check_profile_access({"profile": "nope"}, profiles, [])  # unknown: parse_user_options' part
    with pytest.raises(ProfileForbidden, match="group\\(s\\) research, staff only"):
        check_profile_access({"profile": "gpu-4"}, profiles, ["course"])
