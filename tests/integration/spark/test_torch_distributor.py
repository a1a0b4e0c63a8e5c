"""Data-parallel PyTorch on a real Spark standalone cluster, from the PySpark kernel (issue 15).

pyspark's own ``TorchDistributor`` (``torch.distributed`` with gloo on CPUs) runs 2 ranks in the
executors of two workers (a master and two workers of 1 core, started from pyspark's
``spark-class`` by ``tests/support/sparkcluster.py``). Each rank streams its own shards of the
student's
store with :class:`~scalelab.store.streaming.TorchParquetDataset` (rank and world size from the
process group): every sample once per epoch across the ranks, a new order each epoch, the same
order for the same seed; rank 0's state dict comes back to the notebook, and its checkpoint is
written into the student's home through the kernel's own ``store``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psutil

from tests.support.kernelrun import Kernel, folded_traces

#: The Million Song subset as 4 shards of the student's home, with an ``id`` column.
SHARDS = """
import pyarrow as pa, pyarrow.parquet as pq
with store.open("datasets/millionsong/parquet/part-00000.parquet") as f:
    table = pq.read_table(f)
table = table.append_column("id", pa.array(range(table.num_rows), pa.int64()))
n = table.num_rows
for i in range(4):
    with store.open(f"home/tester/songs/part-{i:05d}.parquet", "wb") as f:
        pq.write_table(table.slice(i * n // 4, (i + 1) * n // 4 - i * n // 4), f)
features = [c for c in table.column_names if c.startswith("f")]
n, len(features)
"""

#: A student's training function: DDP over gloo, each rank its own shards; rank 0 returns the
#: ids each rank saw per epoch (gathered), its state dict, each rank's YARN container
#: (``CONTAINER_ID``, set by a NodeManager; empty elsewhere), and writes a checkpoint to the home.
TRAIN = """
from pyspark.ml.torch.distributor import TorchDistributor
from scalelab.store.streaming import TorchParquetDataset

def train(dataset, n_features, epochs, store):
    import io
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    containers = [None] * world
    dist.all_gather_object(containers, os.environ.get("CONTAINER_ID", ""))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(n_features, 1).double())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-7)
    seen = []
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        ids = []
        with model.join():  # ranks with fewer batches do not hang the others
            for batch in DataLoader(dataset, batch_size=256):
                ids.extend(batch["id"].tolist())
                optimizer.zero_grad()
                target = batch["year"].double().unsqueeze(1)
                loss = ((model(batch["features"]) - target) ** 2).mean()
                loss.backward()
                optimizer.step()
        everyone = [None] * world
        dist.all_gather_object(everyone, ids)
        seen.append(everyone)
    state = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    if rank == 0:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        store.pipe_file("home/tester/checkpoints/linear.pt", buffer.getvalue())
    dist.destroy_process_group()
    return (
        {"world": world, "seen": seen, "state": state, "containers": containers}
        if rank == 0 else None
    )

def run(epochs):
    songs = TorchParquetDataset(
        "home/tester/songs", store=store, stack={"features": features}, seed=7
    )
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    return distributor.run(train, songs, len(features), epochs, store)
"""

#: What the notebook checks of a run (printed as JSON).
CHECK = """
import io, json, torch
first, again = run(2), run(1)
checkpoint = torch.load(io.BytesIO(store.cat_file("home/tester/checkpoints/linear.pt")))
model = torch.nn.Linear(len(features), 1).double()
model.load_state_dict(first["state"])
print(json.dumps({
    "world": first["world"],
    "seen": first["seen"],
    "again": again["seen"],
    "weight_shape": list(model.weight.shape),
    "checkpoint_matches": all(torch.equal(checkpoint[k], again["state"][k]) for k in checkpoint),
}))
"""


def _cluster_kernel_env(base: dict[str, str], master: str, log_dir: Path) -> dict[str, str]:
    """The kernel's environment for Spark on ``master``, executors of 768 MiB."""
    return {
        **base,
        "SCALELAB_SPARK_MASTER": master,
        "SCALELAB_SPARK_DRIVER_MEMORY": "1g",
        "SCALELAB_SPARK_CONF": json.dumps({"spark.executor.memory": "768m"}),
        "SPARK_LOCAL_IP": "127.0.0.1",  # the driver, reachable by the workers on loopback
        "SCALELAB_LOG_DIR": str(log_dir),
    }


def test_data_parallel_training_from_the_notebook_streams_each_sample_once_per_epoch(
    kernel_environment: dict[str, str], two_workers: str, tmp_path: Path
):
    env = _cluster_kernel_env(kernel_environment, two_workers, tmp_path / "logs")
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        shards = kernel.run(SHARDS, timeout_s=300)
        assert shards["error"] is None, shards
        rows, n_features = eval(shards["result"])
        assert (rows, n_features) == (6724, 12)
        defined = kernel.run(TRAIN)
        assert defined["error"] is None, defined
        out = kernel.run(CHECK, timeout_s=600)
    assert out["error"] is None, out
    result = json.loads(out["stdout"].strip().splitlines()[-1])
    assert result["world"] == 2
    everything = list(range(rows))
    for epoch in result["seen"]:
        ranks = [set(ids) for ids in epoch]
        assert all(ranks) and not ranks[0] & ranks[1]  # both ranks worked, on disjoint rows
        assert sorted(epoch[0] + epoch[1]) == everything  # every sample once per epoch
    first, second = result["seen"]
    assert first != second  # a new order each epoch
    assert result["again"][0] == first  # the same order for the same seed
    assert result["weight_shape"] == [1, n_features]  # rank 0's model, back in the notebook
    assert result["checkpoint_matches"]  # its checkpoint in the student's home


#: Three ranks on a cluster of two 1-core workers: a barrier stage that can never start.
TOO_MANY = """
from pyspark.ml.torch.distributor import TorchDistributor
sc.parallelize(range(2), 2).count()  # both executors registered
TorchDistributor(num_processes=3, local_mode=False, use_gpu=False).run(lambda: "never")
"""


def test_more_ranks_than_task_slots_is_explained_instead_of_waiting_ten_minutes(
    kernel_environment: dict[str, str], two_workers: str, tmp_path: Path
):
    env = _cluster_kernel_env(kernel_environment, two_workers, tmp_path / "logs")
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        # Spark's own check would retry for 10 minutes (15 s x 40); ScaleLab's for about 30 s.
        out = kernel.run(TOO_MANY, timeout_s=240)
    assert out["error"] is not None, out
    assert "BarrierJobSlotsNumberCheckFailed" in out["error"][1]
    # After TorchDistributor's own "Started distributed training with 3 executor processes":
    explanation = out["stderr"].split("ScaleLab: ", 1)[-1]
    assert explanation.startswith("the job's barrier stage"), out["stderr"]
    assert f"{two_workers} offers 2 task slot(s) now (2 executor(s))" in explanation
    assert "Setting to change: num_processes" in explanation
    assert "at most 2 processes" in explanation


#: A training function whose rank 1 raises after the process group is up: rank 0 then fails
#: too (its peer is gone), and Spark aborts the barrier stage.
CRASH = """
from pyspark.ml.torch.distributor import TorchDistributor

def train():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        print("rank 1 read its first batch")
        raise ValueError("expected a batch of 64 images, got 63")
    dist.barrier()

TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(train)
"""


def test_a_rank_that_crashes_is_named_with_its_executor_host_and_last_lines(
    kernel_environment: dict[str, str], two_workers: str, tmp_path: Path
):
    env = _cluster_kernel_env(kernel_environment, two_workers, tmp_path / "logs")
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run(CRASH, timeout_s=300)
    assert out["error"] is not None, out
    (tmp_path / "crash-stderr.txt").write_text(out["stderr"])
    explanation = out["stderr"].split("ScaleLab: ", 1)[-1]
    first_line = explanation.splitlines()[0]
    # Which rank, where (the executor the REST API names, on loopback here), and why.
    assert re.match(
        r"rank 1 of the TorchDistributor job failed in executor \d+ on (127\.0\.0\.1|localhost): "
        r"ValueError: expected a batch of 64 images, got 63\.",
        first_line,
    ), explanation
    assert "Setting to change: the training function" in explanation
    # Its last lines: what it printed, its own traceback, without torch's "[rank1]:" prefix.
    last = explanation.split("last lines:", 1)[1]
    assert "rank 1 read its first batch" in last
    assert re.search(r'File "/tmp/ipykernel_\d+/\d+\.py", line \d+, in train', last), last
    assert "[rank1]" not in last
    # TorchDistributor's words stay below, in the folded traces.
    [block] = folded_traces(out)
    assert "TorchDistributor failed during training" in block["text/plain"]


#: Ranks that would train for ever; each writes its pid and its torchrun's (its parent) to
#: ``folder`` once its process group is up.
ENDLESS = """
from pyspark.ml.torch.distributor import TorchDistributor

def train(folder):
    import os, time
    import torch.distributed as dist
    dist.init_process_group("gloo")
    pids = f"{os.getpid()} {os.getppid()}"
    with open(f"{folder}/rank-{dist.get_rank()}.pids", "w") as f:
        f.write(pids)
    while True:
        dist.barrier()
        time.sleep(0.5)

TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(train, FOLDER)
"""

#: The next job needs both task slots at once (a barrier stage of 2 tasks).
AFTER = """
from pyspark.ml.torch.distributor import TorchDistributor

def again():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    return dist.get_world_size()

TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(again)
"""


def _live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _until_idle(kernel: Kernel, msg_id: str, timeout_s: float = 120) -> tuple[str | None, str]:
    """The error name and the stderr of the cell ``msg_id`` (sent with ``kc.execute``), once
    the kernel is idle again."""
    error, stderr = None, ""
    while True:
        msg = kernel.kc.get_iopub_msg(timeout=timeout_s)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stderr":
            stderr += content["text"]
        elif kind == "error":
            error = content["ename"]
        elif kind == "status" and content["execution_state"] == "idle":
            kernel.reply_to(msg_id, timeout_s)  # its reply
            return error, stderr


def test_interrupting_the_cell_stops_every_rank_and_frees_the_task_slots(
    kernel_environment: dict[str, str], two_workers: str, tmp_path: Path
):
    env = _cluster_kernel_env(kernel_environment, two_workers, tmp_path / "logs")
    folder = tmp_path / "pids"
    folder.mkdir()
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        assert kernel.run(f"FOLDER = {str(folder)!r}")["error"] is None
        cell = kernel.kc.execute(ENDLESS)
        wait_for = time.monotonic() + 300
        while len(list(folder.glob("rank-*.pids"))) < 2 and time.monotonic() < wait_for:
            time.sleep(0.5)
        pids = [int(p) for f in folder.glob("rank-*.pids") for p in f.read_text().split()]
        assert len(pids) == 4, pids  # two ranks and their torchruns
        assert all(_live(pid) for pid in pids)
        kernel.km.interrupt_kernel()
        error, stderr = _until_idle(kernel, cell)
        assert error == "KeyboardInterrupt", (error, stderr)
        assert "the cell's Spark jobs were cancelled" in stderr, stderr
        # Every rank and torchrun ends (Spark kills the tasks' Python workers, their torchrun
        # wrappers see it and stop torchrun, which stops its ranks).
        gone_by = time.monotonic() + 90
        while any(_live(pid) for pid in pids) and time.monotonic() < gone_by:
            time.sleep(0.5)
        assert not [pid for pid in pids if _live(pid)]
        again = kernel.run(AFTER, timeout_s=300)
    assert again["error"] is None, again
    assert again["result"] == "2"  # both task slots were free for the next barrier job


#: Ranks that report 2 epochs, then wait (up to 2 minutes) for the test to have seen the
#: table's rows in the cell's output before they end: the job ends only after the rows came.
PROGRESS = """
from pyspark.ml.torch.distributor import TorchDistributor
from scalelab.kernels.train_progress import TrainingProgress

def train(progress, flag):
    import os, time
    import torch.distributed as dist
    dist.init_process_group("gloo")
    for epoch in range(2):
        progress.report(epoch=epoch, loss=1.0 / (epoch + 1), samples_per_s=100.0 * (epoch + 1))
    deadline = time.monotonic() + 120
    while not os.path.exists(flag):
        if time.monotonic() > deadline:
            raise TimeoutError("the notebook never showed the progress rows")
        time.sleep(0.2)
    dist.barrier()
    return "done"

with TrainingProgress() as progress:
    outcome = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(
        train, progress.reporter(), FLAG
    )
outcome, len(progress.rows)
"""


def test_every_ranks_epochs_reach_the_notebooks_table_while_the_job_runs(
    kernel_environment: dict[str, str], two_workers: str, tmp_path: Path
):
    env = _cluster_kernel_env(kernel_environment, two_workers, tmp_path / "logs")
    flag = tmp_path / "rows-seen"
    seen: list[str] = []

    def hook(msg: dict) -> None:
        if msg["msg_type"] in ("display_data", "update_display_data"):
            text = msg["content"]["data"].get("text/plain", "")
            seen.append(text)
            rows = [line.split() for line in text.splitlines()[1:]]
            if {(r[0], r[1]) for r in rows} >= {("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")}:
                flag.touch()  # every rank's epochs, while the job still waits on this

    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        assert kernel.run(f"FLAG = {str(flag)!r}")["error"] is None
        reply = kernel.kc.execute_interactive(PROGRESS, timeout=400, output_hook=hook)
        assert reply["content"]["status"] == "ok", seen
        out = kernel.run(
            "outcome, len(progress.rows), progress.host == sc.getConf().get('spark.driver.host')"
        )
    assert out["result"] == "('done', 4, True)"  # the ranks reached the driver's own address
    assert flag.exists()
    tables = [text for text in seen if text.lstrip().startswith("epoch")]  # not Spark's banner
    assert tables[-1].splitlines()[0].split() == ["epoch", "rank", "loss", "samples_per_s", "at_s"]
    assert "0.5" in tables[-1] and "200" in tables[-1]  # epoch 1's figures, as reported
