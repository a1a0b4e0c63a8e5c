"""GPU readings where the GPU is: the parts that need no running hub, kernel or cluster. The rest
runs for real in ``tests/integration/hub/test_gpu_reports.py``.
"""

from __future__ import annotations

import time

import pytest
from traitlets.config import Config

from scalelab.hub_ext.hub.gpu_reports import foreign_gpus, held_readings, parse_report
from scalelab.hub_ext.server.gpu_report import GPUReporter, slurm_gpus
from scalelab.spawner.slurm import SlurmGPUs
from scalelab.spawner.slurm_jobs import SlurmJob, held_gpus


def test_a_report_is_read_strictly():
    server, readings = parse_report(
        {"server": "", "gpus": [{"uuid": "GPU-a", "utilization_pct": 3, "memory_used_mib": 7}]}
    )
    assert (server, readings) == ("", [("GPU-a", (3.0, 7))])
    for bad, message in [
        ({"gpus": [{"uuid": "GPU-a", "utilization_pct": 120}]}, "from 0 to 100"),
        ({"gpus": [{"utilization_pct": 1}]}, "needs a 'uuid'"),
        ({"gpus": [{"uuid": "G", "utilization_pct": 1, "memory_used_mib": -1}]}, ">= 0"),
        ({"server": "", "gpus": [], "extra": 1}, "a report is"),
        ([], "a report is"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_report(bad)


def test_readings_go_to_the_held_gpus_by_uuid_else_in_order():
    held = ("GPU-ledger-0", "GPU-ledger-1")
    # the device plugin's devices, whose UUIDs are not the ledger's
    assert held_readings(held, [("GPU-x", (1.0, 1)), ("GPU-y", (2.0, 2))]) == {
        "GPU-ledger-0": (1.0, 1),
        "GPU-ledger-1": (2.0, 2),
    }
    assert held_readings(held, [("GPU-x", (1.0, 1)), ("GPU-ledger-0", (9.0, None))]) == {
        "GPU-ledger-0": (9.0, None),
        "GPU-ledger-1": (1.0, 1),
    }
    assert held_readings(("GPU-ledger-0",), [("a", (1.0, 1)), ("b", (2.0, 2))]) == {
        "GPU-ledger-0": (1.0, 1)
    }


def test_a_report_naming_a_gpu_the_server_does_not_hold_is_refused():
    """Slurm servers name their GPUs as the hub does: naming another student's is refused, so
    no server can mark another's GPU idle; UUIDs the hub does not know (a pod's) are mapped."""
    known = {"n1/gpu0", "n1/gpu1", "n2/gpu0", "n2/gpu1"}
    mine = ("n1/gpu1",)
    assert foreign_gpus(mine, known, [("n1/gpu1", (0.0, 1))]) == []
    assert foreign_gpus(mine, known, [("n1/gpu1", (9.0, 1)), ("n2/gpu0", (0.0, 1))]) == ["n2/gpu0"]
    assert foreign_gpus(("GPU-ledger-0",), {"GPU-ledger-0"}, [("GPU-pod-7", (1.0, 1))]) == []


def test_a_slurm_server_names_its_gpus_as_the_hub_does():
    """The server's names of its job's GPUs are the hub's ledger names of the same job's GPUs;
    each is read through the device CUDA_VISIBLE_DEVICES gives it (the node's own index, or 0..
    where the job's cgroup shows only its GPUs, or a UUID)."""
    job = SlurmJob(job_id="7", state="RUNNING", batch_host="n2", gpus={"n2": (1, 3)})
    env = {"SLURMD_NODENAME": "n2", "SLURM_JOB_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "1,3"}
    named = slurm_gpus(env)
    assert named == [("n2/gpu1", "1"), ("n2/gpu3", "3")]
    assert tuple(name for name, _ in named) == held_gpus(job)
    constrained = {**env, "CUDA_VISIBLE_DEVICES": "0,1"}
    assert slurm_gpus(constrained) == [("n2/gpu1", "0"), ("n2/gpu3", "1")]
    assert slurm_gpus({**env, "CUDA_VISIBLE_DEVICES": ""}) == [("n2/gpu1", "1"), ("n2/gpu3", "3")]
    assert slurm_gpus({"SLURMD_NODENAME": "n2", "CUDA_VISIBLE_DEVICES": ""}) == []  # CPU only
    assert slurm_gpus({"CUDA_VISIBLE_DEVICES": "0"}) == []  # not in a Slurm job

    # the node's NVML (declared here: no GPU on this machine) sees 4 GPUs; the job reads 1 and 3
    config = Config()
    config.GPUReporter.source_class = "scalelab.spawner.gpu_source.DeclaredReadings"
    config.DeclaredReadings.readings = {f"GPU-n2-{i}": [10.0 * i, i] for i in range(4)}
    url = "http://hub/hub/api/scalelab/users/alice/gpu-readings"
    reporter = GPUReporter([], url, "token", "", named, config=config)
    assert reporter.read() == {"n2/gpu1": (10.0, 1), "n2/gpu3": (30.0, 3)}
    by_uuid = [("n2/gpu1", "GPU-n2-2")]  # CUDA_VISIBLE_DEVICES as UUIDs
    assert GPUReporter([], url, "t", "", by_uuid, config=config).read() == {"n2/gpu1": (20.0, 2)}

    # the hub's Slurm source keeps the reports as ReportedGPUs does
    source = SlurmGPUs()
    assert source.wants_reports
    source.record({"n2/gpu1": (10.0, 1)})
    source.record({"n2/gpu3": (0.0, 3)}, now=time.time() - source.max_age_s - 1)
    assert source.utilization(["n2/gpu1", "n2/gpu3", "n1/gpu0"]) == {"n2/gpu1": (10.0, 1)}


def test_a_server_reports_its_granted_gpus_or_else_every_gpu_it_sees():
    """On a shared host the server's source sees every GPU: it reports its own. In a pod whose
    devices the device plugin picked, it sees none of the ledger's UUIDs: it reports all."""
    readings = {"GPU-node1-0": [10.0, 1], "GPU-node1-1": [20.0, 2]}
    config = Config()
    config.GPUReporter.source_class = "scalelab.spawner.gpu_source.DeclaredReadings"
    config.DeclaredReadings.readings = readings
    url = "http://hub/hub/api/scalelab/users/alice/gpu-readings"
    own = GPUReporter(["GPU-node1-1"], url, "token", "", config=config)
    assert own.read() == {"GPU-node1-1": (20.0, 2)}
    pod = GPUReporter(["GPU-ledger-0", "GPU-ledger-1"], url, "token", "", config=config)
    assert pod.read() == {"GPU-node1-0": (10.0, 1), "GPU-node1-1": (20.0, 2)}
    server, parsed = parse_report(pod.body(pod.read()))
    assert server == ""
    assert held_readings(("GPU-ledger-0", "GPU-ledger-1"), parsed) == {
        "GPU-ledger-0": (10.0, 1),
        "GPU-ledger-1": (20.0, 2),
    }
