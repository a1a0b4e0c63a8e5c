"""Reading Slurm's output and building a job's options (pure), on output captured from the Slurm
22.05 test cluster of tests/support/slurmcluster.py (tests/support/data/slurm/)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from scalelab.spawner.slurm import insert_directives
from scalelab.spawner.slurm_jobs import (
    MIB,
    SlurmJob,
    cgroup_problems,
    describe_end,
    expand_indices,
    expand_nodes,
    explain_reason,
    format_start,
    held_gpus,
    node_address,
    node_gpus,
    parse_job,
    parse_sacct,
    parse_show_config,
    queue_place,
    sbatch_directives,
    submission_problem,
)

DATA = Path(__file__).resolve().parents[1] / "support" / "data" / "slurm"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_running_job_names_its_node_and_gres_indices():
    job = parse_job(_read("scontrol_running.txt"))
    assert (job.job_id, job.state, job.batch_host) == ("6", "RUNNING", "n1")
    assert job.gpus == {"n1": (0,)}
    assert held_gpus(job) == ("n1/gpu0",)
    assert job.start_time == dt.datetime(2026, 12, 4, 10, 10, 37)


def test_ended_jobs_hold_nothing_and_say_why():
    cancelled = parse_job(_read("scontrol_cancelled.txt"))
    assert (cancelled.state, cancelled.exit_code, cancelled.gpus) == ("CANCELLED", "0:15", {})
    assert describe_end(cancelled) == "Slurm ended job 8: it was cancelled (scancel) (CANCELLED)"
    timeout = parse_job(_read("scontrol_timeout.txt"))
    assert describe_end(timeout) == (
        "Slurm ended job 12: it reached its time limit (TIMEOUT, reason TimeLimit)"
    )


def test_unknown_job_is_an_error():
    with pytest.raises(ValueError, match="no job"):
        parse_job("slurm_load_jobs error: Invalid job id specified\n")


def test_gres_indices_of_several_nodes_and_ranges():
    text = (
        "JobId=7 JobState=RUNNING BatchHost=g01 JOB_GRES=gpu:4 "
        "Nodes=g[01-02] CPU_IDs=0-1 Mem=0 GRES=gpu:a100:2(IDX:0-1) "
        "Nodes=g05 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:1,3) MinCPUsNode=1"
    )
    job = parse_job(text)
    assert job.gpus == {"g01": (0, 1), "g02": (0, 1), "g05": (1, 3)}
    assert expand_indices("0-2,5") == (0, 1, 2, 5)
    assert expand_nodes("n[1-2],gpu7") == ["n1", "n2", "gpu7"]


def test_place_in_queue_follows_slurms_priority():
    text = _read("squeue_start.txt")
    first = queue_place(text, "5")
    second = queue_place(text, "6")
    assert first is not None and second is not None
    assert (first.position, first.length, first.reason) == (1, 2, "Resources")
    assert (second.position, second.length, second.reason) == (2, 2, "Priority")
    assert second.start == dt.datetime(2026, 12, 4, 10, 24, 43)
    assert queue_place(text, "99") is None
    # a later job of higher priority goes first
    assert queue_place(text + "9|4294901799|2026-12-04T10:20:00|N/A|Priority\n", "9") == (
        type(first)(1, 3, None, "Priority")
    )


def test_nodes_gpus_and_addresses():
    text = _read("scontrol_nodes.txt")
    assert node_gpus(text) == [("n1", "127.0.0.1", 2), ("n2", "127.0.0.1", 2)]
    assert node_address(text, "n2") == "127.0.0.1"
    assert node_address(text, "elsewhere") == "elsewhere"
    assert node_gpus("NodeName=c1 Gres=(null) NodeAddr=c1\nNodeName=g1 Gres=gpu:h100:4,nic:1") == [
        ("g1", "g1", 4)
    ]


def test_sacct_line():
    job = parse_sacct("12|TIMEOUT|TimeLimit|0:0\n12.batch|CANCELLED||0:15\n", "12")
    assert job == SlurmJob("12", "TIMEOUT", "TimeLimit", "0:0")
    assert parse_sacct("13|CANCELLED by 0|None|0:0", "13").state == "CANCELLED"
    assert parse_sacct("Slurm accounting storage is disabled", "12") is None
    oom = SlurmJob("14", "OUT_OF_MEMORY", "OutOfMemory", "0:125")
    assert "ran out of memory" in describe_end(oom)


def test_directives_of_a_profile():
    assert sbatch_directives(0) == ["--no-requeue"]
    assert sbatch_directives(2, partition="gpu", qos="course", time_limit="4:00:00") == [
        "--no-requeue",
        "--gres=gpu:2",
        "--partition=gpu",
        "--qos=course",
        "--time=4:00:00",
    ]
    assert sbatch_directives(1, account="dl", extra=["--constraint=h100"]) == [
        "--no-requeue",
        "--gres=gpu:1",
        "--account=dl",
        "--constraint=h100",
    ]
    # a profile's limits: memory in whole MiB (rounded up), whole CPUs (rounded up)
    assert sbatch_directives(0, memory=1024**3, cpus=1.5) == [
        "--no-requeue",
        "--mem=1024M",
        "--cpus-per-task=2",
    ]
    assert sbatch_directives(0, memory=512 * MIB + 1)[1] == "--mem=513M"
    for bad in ({"memory": 0}, {"cpus": 0.0}, {"cpus": -1.0}):
        with pytest.raises(ValueError, match="cannot be limited"):
            sbatch_directives(0, **bad)
    with pytest.raises(ValueError, match="white space"):
        sbatch_directives(1, partition="gpu long")
    with pytest.raises(ValueError, match="newline"):
        sbatch_directives(1, extra=["--x\nrm -rf /"])
    script = insert_directives("#!/bin/bash\n#SBATCH --chdir=/h\nrun\n", ["--gres=gpu:1"])
    assert script == "#!/bin/bash\n#SBATCH --gres=gpu:1\n#SBATCH --chdir=/h\nrun\n"


def test_estimated_start_in_words():
    now = dt.datetime(2026, 12, 4, 10, 0)
    assert format_start(None, now) == "not estimated yet"
    assert format_start(dt.datetime(2026, 12, 4, 10, 9, 40), now) == "at 10:09 (in about 10 min)"
    assert format_start(now, now) == "at 10:00 (under a minute)"
    assert format_start(dt.datetime(2026, 12, 4, 15, 0), now).endswith("(in about 5.0 h)")


def test_pending_reasons_in_words():
    assert explain_reason("Resources") == "the GPUs or CPUs it asks for are in use"
    assert "QOS" in explain_reason("QOSMaxGRESPerUser")
    assert explain_reason("SomethingNew") == ""  # Slurm's own word is shown alone


@pytest.mark.parametrize(
    ("exec_prefix", "args", "root", "found", "problem"),
    [
        # the guide's default on a host with sudo, as root or not: fine
        ("sudo -E -u {username}", [], True, ["sudo"], None),
        ("sudo -E -u {username}", [], False, ["sudo"], None),
        # no sudo installed: every start was HTTP 500
        (
            "sudo -E -u {username}",
            [],
            True,
            [],
            "c.ScaleLabSlurmSpawner.exec_prefix = 'sudo -E -u {username}' runs 'sudo', which is "
            "not installed on the hub's host",
        ),
        # jobs as the hub's user: fine unless that user is root without --allow-root
        ("", [], False, [], None),
        ("", ["--allow-root", "--debug"], True, [], None),
        (
            "",
            ["--debug"],
            True,
            [],
            "c.ScaleLabSlurmSpawner.exec_prefix = '' on a hub run as root submits every job as "
            "root, and Jupyter Server refuses to run as root",
        ),
        ("  ", [], True, [], "add '--allow-root' to c.ScaleLabSlurmSpawner.args"),
    ],
)
def test_a_submission_that_cannot_work_is_named_before_the_hub_starts(
    exec_prefix, args, root, found, problem
):
    said = submission_problem(exec_prefix, args, hub_is_root=root, found=found)
    if problem is None:
        assert said is None
    else:
        assert problem in said


def test_the_hub_refuses_to_start_on_a_slurm_configuration_that_cannot_submit(monkeypatch):
    """validate_spawner_config (scalelab.configure(c), scalelab up, scalelab doctor) asks the
    backend: sudo looked up on the hub's PATH, root from the hub's own uid."""
    from traitlets.config import Config

    from scalelab.spawner import slurm
    from scalelab.spawner.validation import validate_spawner_config

    c = Config()
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)  # a host without sudo
    with pytest.raises(ValueError, match=r"exec_prefix = 'sudo -E -u \{username\}' runs 'sudo'"):
        validate_spawner_config(c, slurm.ScaleLabSlurmSpawner)  # batchspawner's default prefix
    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    validate_spawner_config(c, slurm.ScaleLabSlurmSpawner)
    c.ScaleLabSlurmSpawner.exec_prefix = ""
    monkeypatch.setattr(slurm.os, "geteuid", lambda: 0)
    with pytest.raises(ValueError, match=r"add '--allow-root' to c\.ScaleLabSlurmSpawner\.args"):
        validate_spawner_config(c, slurm.ScaleLabSlurmSpawner)
    c.ScaleLabSlurmSpawner.args = ["--allow-root"]
    validate_spawner_config(c, slurm.ScaleLabSlurmSpawner)


def test_cgroup_confinement_read_from_slurms_configuration():
    """The test cluster's configuration (as a course cluster's): nothing left unconfined; each
    setting turned off in turn is named with its fix."""
    config = parse_show_config(_read("scontrol_config.txt"))
    assert config["TaskPlugin"] == "task/cgroup" and config["ConstrainRAMSpace"] == "yes"
    assert cgroup_problems(config, gpus=True, memory=True) == []
    off = {
        "ConstrainDevices": ("no", "every GPU of its node", "ConstrainDevices=yes"),
        "ConstrainRAMSpace": ("no", "more memory than its --mem", "ConstrainRAMSpace=yes"),
        "SelectTypeParameters": ("CR_CORE", "--mem reserves nothing", "CR_Core_Memory"),
        "ProctrackType": ("proctrack/linuxproc", "outlive its job", "proctrack/cgroup"),
    }
    for key, (value, harm, fix) in off.items():
        (problem,) = cgroup_problems({**config, key: value}, gpus=True, memory=True)
        assert harm in problem and fix in problem, problem
    # what a course does not use is not asked for
    assert cgroup_problems({**config, "ConstrainDevices": "no"}, gpus=False, memory=True) == []
    assert cgroup_problems({**config, "ConstrainRAMSpace": "no"}, gpus=True, memory=False) == []
    # no task/cgroup: one problem for it (its Constrain* settings would do nothing)
    problems = cgroup_problems({**config, "TaskPlugin": "task/affinity"}, gpus=True, memory=True)
    assert len(problems) == 1 and "TaskPlugin=task/cgroup" in problems[0], problems
    assert len(cgroup_problems({}, gpus=True, memory=True)) == 3  # task, proctrack, select
