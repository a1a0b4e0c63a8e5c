"""The pure parts of ``scalelab doctor``'s Slurm partition check
(``scalelab.commands.doctor_slurm``); the check itself runs against the real Slurm test cluster
in ``tests/integration/slurm/test_slurm_hub.py``."""

from __future__ import annotations

from scalelab.commands.doctor_slurm import job_partitions, parse_sinfo

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
