"""What a server's sandbox costs: spawn to ready, a first Spark result and a short Lab 2 epoch,
with and without it (issue 31's goal: each ratio <= 1.10), and the memory a sandbox adds.

Two real ``scalelab up`` hubs run side by side as root, students as system users (as a course
runs): one with ``c.ScaleLabSpawner.sandbox = "on"`` (a network namespace, a veth pair, the hub's
relay, private /tmp, /var/tmp and /dev/shm per server), one with ``"off"`` (the baseline: the
same hub, spawner, cgroup and limits). Each round, in an order that alternates, each hub:

- starts its student's server: ``spawn_s``, from the REST POST to ready;
- starts a PySpark kernel and runs ``spark.range(100000).count()``: ``first_spark_s``, from the
  kernel's start request to the result (the driver's JVM starts inside the sandbox);
- starts a PyTorch kernel and trains Lab 2's ConvNet shape (two 3x3 convolutions, 32 and 64
  channels, max pooling, a linear layer) for one epoch on the first 6,000 Fashion-MNIST
  training images (``../shared/data/fashion_mnist``), batch 100, one thread: ``epoch_s``, timed
  inside the kernel;

then stops the server. Each figure's median per mode and ``*_ratio`` (sandbox / baseline) and
``*_ratio_paired_median`` (median of each round's ratio) are printed. ``sandbox_memory_kib``:
what the host's ``MemAvailable`` drops by per sandbox link (namespace and veth pair, 16 made and
removed; the relay is a few sockets in the hub), with ``sandbox_processes`` (0: the sandbox
runs no process of its own). Plus the load average at the start and end and the bench's own
seconds. ``--quick``: 2 rounds (about 4 minutes on 2 cores), default 4.

Needs root (system users, namespaces). Usage: ``.venv/bin/python bench/sandbox_cost.py
[--quick]`` from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from scalelab.spawner import netns
from scalelab.spawner.sandbox import claim_link, release_link
from tests.support.hubproc import ScaleLabUp, execute
from tests.support.sysusers import remove_users

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "fashion_mnist"
MODES = ("sandbox", "baseline")
USERS = {"sandbox": "sbcost-on", "baseline": "sbcost-off"}

EPOCH = """
import gzip, time
import numpy as np
import torch
from torch import nn
torch.set_num_threads(1)
torch.manual_seed(0)
def idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)
x = idx({images!r}, 16).reshape(-1, 1, 28, 28)[:6000].astype(np.float32) / 255
y = idx({labels!r}, 8)[:6000].astype(np.int64)
x, y = torch.from_numpy(x), torch.from_numpy(y)
model = nn.Sequential(
    nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 5 * 5, 10),
)
optimizer = torch.optim.Adam(model.parameters(), 1e-3)
start = time.perf_counter()
for i in range(0, 6000, 100):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x[i : i + 100]), y[i : i + 100])
    loss.backward()
    optimizer.step()
print(time.perf_counter() - start)
"""


def _hub(base: Path, mode: str) -> ScaleLabUp:
    setting = "on" if mode == "sandbox" else "off"
    (base / mode).mkdir()
    (base / mode).chmod(0o711)
    return ScaleLabUp(
        base / mode / "state",
        extra_config=f"c.ScaleLabSpawner.sandbox = {setting!r}\n",
        shared_identity=False,
        warm_spark=True,  # the product as shipped
    )


async def _round(hub: ScaleLabUp, user: str) -> dict[str, float]:
    start = time.perf_counter()
    hub.start_server(user)
    spawn_s = time.perf_counter() - start
    start = time.perf_counter()
    kernel = hub.server_api(user, "POST", "/kernels", json={"name": "scalelab-pyspark"})
    out = await execute(hub, user, kernel.json()["id"], "spark.range(100000).count()")
    first_spark_s = time.perf_counter() - start
    assert out["result"] == "100000", out
    kernel = hub.server_api(user, "POST", "/kernels", json={"name": "scalelab-pytorch"})
    code = EPOCH.format(
        images=str(DATA / "train-images-idx3-ubyte.gz"),
        labels=str(DATA / "train-labels-idx1-ubyte.gz"),
    )
    out = await execute(hub, user, kernel.json()["id"], code)
    assert out["error"] is None, out
    epoch_s = float(out["stdout"].strip().splitlines()[-1])
    assert hub.api("DELETE", f"/users/{user}/server").status_code in (202, 204)
    deadline = time.monotonic() + 120
    while hub.api("GET", f"/users/{user}").json()["servers"] and time.monotonic() < deadline:
        time.sleep(0.5)
    return {"spawn_s": spawn_s, "first_spark_s": first_spark_s, "epoch_s": epoch_s}


def _mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def sandbox_memory_kib(count: int = 16) -> float:
    """What ``MemAvailable`` drops by per sandbox link, over ``count`` links made at once."""
    subnet = netns.parse_subnet("10.247.0.0/24")
    before = _mem_available_kib()
    links = [claim_link(subnet, f"scalelab-bench-{uuid.uuid4().hex[:8]}") for _ in range(count)]
    after = _mem_available_kib()
    for link in links:
        release_link(link)
    return round((before - after) / count, 1)


def _medians(runs: list[dict], mode: str, key: str) -> float:
    return statistics.median(run[mode][key] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds instead of 4")
    args = parser.parse_args()
    info = RunInfo()
    rounds = 2 if args.quick else 4
    base = Path(tempfile.mkdtemp(prefix="scalelab-sandbox-cost-"))
    base.chmod(0o711)  # the students' users pass through to the state folder
    hubs = {mode: _hub(base, mode) for mode in MODES}
    runs: list[dict] = []
    try:
        for hub in hubs.values():
            hub.start()
        for index in range(rounds):
            order = MODES if index % 2 == 0 else MODES[::-1]
            run = {}
            for mode in order:
                run[mode] = asyncio.run(_round(hubs[mode], USERS[mode]))
            runs.append(run)
            print(json.dumps({"round": index, **run}), file=sys.stderr)
    finally:
        for hub in hubs.values():
            hub.kill()
        remove_users(list(USERS.values()))
        shutil.rmtree(base, ignore_errors=True)
    figures: dict = {"rounds": rounds}
    for key in ("spawn_s", "first_spark_s", "epoch_s"):
        name = key.removesuffix("_s")
        sandbox, baseline = _medians(runs, "sandbox", key), _medians(runs, "baseline", key)
        figures[f"sandbox_{name}_median_s"] = round(sandbox, 3)
        figures[f"baseline_{name}_median_s"] = round(baseline, 3)
        figures[f"{name}_ratio"] = round(sandbox / baseline, 3)
        paired = [run["sandbox"][key] / run["baseline"][key] for run in runs]
        figures[f"{name}_ratio_paired_median"] = round(statistics.median(paired), 3)
    figures["sandbox_memory_kib"] = sandbox_memory_kib()
    figures["sandbox_processes"] = 0
    figures["runs"] = runs
    print(json.dumps({**figures, **info.figures()}))


if __name__ == "__main__":
    main()
