"""The pure parts of ``scalelab doctor``'s Slurm partition check and its try of the
``exec_prefix`` (``scalelab.commands.doctor_slurm``, with ``true`` and ``false`` as prefixes);
the checks themselves run against the real Slurm test cluster in
``tests/integration/slurm/test_slurm_hub.py`` and, with sudo, ``test_slurm_sudo.py``."""

from __future__ import annotations

from scalelab.commands.doctor_report import FAIL, OK, WARN
from scalelab.commands.doctor_slurm import (
    check_prefix_as_student,
    job_partitions,
    parse_sinfo,
    prefixed,
)

PROFILES = [
    {"slug": "cpu", "display_name": "CPU only", "default": True},
    {"slug": "gpu-1", "display_name": "1 GPU", "gpus": 1},
    {"slug": "gpu-2", "display_name": "2 GPUs", "gpus": 2},
]


def test_each_profiles_jobs_go_to_its_own_partition_or_the_spawners():
    assert job_partitions(PROFILES, {}, "") == {"": True}  # all to the default partition
    assert job_partitions(PROFILES, {"gpu-1": {"partition": "h100"}}, "cpu") == {
        "cpu": True,  # gpu-2 still goes to the spawner's partition
        "h100": True,
    }
    assert job_partitions(PROFILES[:1], {}, "teaching") == {"teaching": False}
    two = {"gpu-1": {"partition": "gpu"}, "gpu-2": {"partition": "gpu"}}
    assert job_partitions(PROFILES, two, "") == {"": False, "gpu": True}


def test_sinfo_lines_become_partitions_with_their_default_state_and_gres():
    text = (
        "debug*|up|(null)\n"
        "gpu|up|gpu:2\n"
        "gpu|up|gpu:h100:4(S:0-1),shard:8\n"
        "old|down|gpu:1\n"
        "not a sinfo line\n"
    )
    assert parse_sinfo(text) == {
        "debug": {"default": True, "up": True, "gres": set()},
        "gpu": {"default": False, "up": True, "gres": {"gpu:2", "gpu:h100:4(S:0-1)", "shard:8"}},
        "old": {"default": False, "up": False, "gres": {"gpu:1"}},
    }


def test_the_prefix_is_formatted_for_the_student_and_sudo_never_asks():
    argv = prefixed("sudo -E -u {username}", "alice", ["sbatch", "--version"])
    assert argv == ["sudo", "-n", "-E", "-u", "alice", "sbatch", "--version"]
    assert prefixed("/usr/bin/sudo -u {username}", "bob", ["squeue"])[:2] == ["/usr/bin/sudo", "-n"]
    assert prefixed("ssh {username}@login", "carol", ["scancel"]) == [
        "ssh",
        "carol@login",
        "scancel",
    ]


def test_the_prefix_is_tried_as_the_named_student_or_a_warning_says_whom_to_name():
    env = {"PATH": "/usr/bin:/bin"}
    unnamed = check_prefix_as_student("sudo -E -u {username}", "", env)
    assert unnamed.status == WARN and "--student NAME" in unnamed.fix
    # a prefix that fails (here `false`): the command it ran, its exit status, the rule to write
    failed = check_prefix_as_student("false {username}", "alice", env)
    assert failed.status == FAIL
    assert failed.detail.endswith("ran false alice sbatch --version: exit 1: no output")
    assert "NOPASSWD:SETENV: /usr/bin/sbatch, /usr/bin/squeue, /usr/bin/scancel" in failed.fix
    # one whose commands all succeed (`true`, whatever it is given)
    fine = check_prefix_as_student("true {username}", "alice", env)
    assert fine.status == OK
    assert fine.detail.endswith("runs sbatch, squeue and scancel as alice (true {username})")
