"""Benchmark: Lab 2's (or Lab 3's) Run All, as a student's kernel runs it, at the notebook's
own defaults.

Executes the instructor (reference) version ``notebooks/lab2_fashion_mnist_convnet.ipynb``
(``--lab 3``: ``notebooks/lab3_distributed_training.ipynb``) cell after cell through its ScaleLab
kernel (TensorFlow; Lab 3: PySpark, Spark ``local[*]``) with nbclient, as JupyterLab's Run All
would, with no parameter overridden: the notebook chooses its defaults by device (no GPU here:
``SCALELAB_GPUS=""`` and ``CUDA_VISIBLE_DEVICES=""``, the CPU profile). The kernel's environment
is the one the tests give kernels (``kernel_environment`` in tests/conftest.py): a course store
in a temporary folder with both data sets fetched from the shared mirror
(``../shared/data``, or ``--data``), ScaleLab's kernelspecs, and no pytest marker (so
ipykernel captures file descriptors 1 and 2 into the cells, as in a student's server).

Prints one JSON object:

- ``run_all_s``: seconds from the first cell's start to the last cell's end (the kernel's
  start and the store's set-up excluded: ``kernel_start_s``, ``store_setup_s``);
- ``kernel_cpu_s``: CPU seconds (user + system) of the kernel's process tree over the run;
- ``slowest_cells``: the five slowest cells (``cell``: its id, ``s``: seconds, ``first_line``);
- ``parameters``: ``EPOCHS``, ``TORCH_EPOCHS``, ``mode`` (the challenge's), ``test_accuracy``,
  ``torch_test_accuracy``, ``challenge_accuracy`` as the run chose and reached them (Lab 3:
  ``WORKERS``, ``SLOTS``, ``TRAIN_IMAGES``, ``EPOCHS``, ``speedup``, and per number of workers
  ``samples_per_s``, ``test_accuracy``, ``where`` the ranks ran and ``job_s``);
- ``stderr_outputs``: the start of each stderr output of any cell (none in a clean run),
  ``progress_widgets``: the number of progress-bar widgets shown;
- the load average at the start and end and the bench's own wall and CPU seconds
  (:class:`bench._run_info.RunInfo`).

Usage: ``.venv/bin/python bench/lab2_run_all.py [--lab 3] [--executed FILE]`` from the
repository root (Lab 2: about 8 minutes on two cores; Lab 3: about 3). ``--executed`` writes the
executed notebook there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo, tree_cpu_seconds
from scalelab.kernels.specs import install_kernelspecs
from scalelab.store import DATASETS, fetch_dataset, open_store

REPO = Path(__file__).resolve().parents[1]
LABS = {
    "2": REPO / "notebooks" / "lab2_fashion_mnist_convnet.ipynb",
    "3": REPO / "notebooks" / "lab3_distributed_training.ipynb",
}
SHARED_DATA = REPO.parent / "shared" / "data"
WIDGET = "application/vnd.jupyter.widget-view+json"
RESULTS = {
    "2": (
        "EPOCHS", "TORCH_EPOCHS", "mode", "test_accuracy", "torch_test_accuracy",
        "challenge_accuracy",
    ),
    "3": ("WORKERS", "SLOTS", "TRAIN_IMAGES", "EPOCHS", "speedup", "results"),
}  # fmt: skip


def kernel_env(workdir: Path, mirror: Path) -> tuple[dict[str, str], float]:
    """The kernel's environment (see the module's doc) and the seconds its store took."""
    began = time.perf_counter()
    store_url = (workdir / "store").as_uri()
    fs = open_store(store_url)
    for spec in DATASETS.values():
        fetch_dataset(spec, fs, mirror=mirror, log=lambda _line: None)
    jupyter = workdir / "jupyter"
    install_kernelspecs(jupyter)
    extra = {
        "JUPYTER_PATH": str(jupyter),
        "SCALELAB_STORE_URL": store_url,
        "SCALELAB_STORE_OPTIONS": "{}",
        "SCALELAB_GPUS": "",
        "CUDA_VISIBLE_DEVICES": "",
    }
    os.environ.update(extra)  # nbclient finds the kernelspec through this process's JUPYTER_PATH
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return env, time.perf_counter() - began


def _seconds(cell: nbformat.NotebookNode) -> float:
    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return 0.0
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="the data sets' mirror")
    parser.add_argument("--lab", choices=sorted(LABS), default="2", help="which lab")
    parser.add_argument("--executed", type=Path, help="write the executed notebook there")
    args = parser.parse_args()
    info = RunInfo()
    with tempfile.TemporaryDirectory(prefix=f"lab{args.lab}-run-all-") as tmp:
        workdir = Path(tmp)
        env, store_s = kernel_env(workdir, args.data)
        nb = nbformat.read(LABS[args.lab], as_version=4)
        names = ", ".join(f"{n!r}: {n}" for n in RESULTS[args.lab])
        nb.cells.append(nbformat.v4.new_code_cell(f"import json; print(json.dumps({{{names}}}))"))
        client = NotebookClient(
            nb,
            kernel_name=nb.metadata.kernelspec.name,
            timeout=3600,
            startup_timeout=180,
            resources={"metadata": {"path": str(workdir)}},
        )
        began = time.perf_counter()
        with client.setup_kernel(env=env):
            pid = client.km.provisioner.pid
            kernel_start_s = time.perf_counter() - began
            cpu_at_start = tree_cpu_seconds(pid)
            began = time.perf_counter()
            for index, cell in enumerate(nb.cells[:-1]):
                client.execute_cell(cell, index)
            run_all_s = time.perf_counter() - began
            kernel_cpu_s = tree_cpu_seconds(pid) - cpu_at_start
            client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
    outputs = [out for cell in nb.cells[:-1] if cell.cell_type == "code" for out in cell.outputs]
    last = "".join(out.get("text", "") for out in nb.cells[-1].outputs)
    timed = sorted(
        ((_seconds(c), c) for c in nb.cells[:-1] if c.cell_type == "code"), key=lambda t: -t[0]
    )
    print(
        json.dumps(
            {
                "lab": int(args.lab),
                "run_all_s": round(run_all_s, 1),
                "kernel_cpu_s": round(kernel_cpu_s, 1),
                "kernel_start_s": round(kernel_start_s, 1),
                "store_setup_s": round(store_s, 1),
                "slowest_cells": [
                    {"cell": c.id, "s": round(s, 1), "first_line": c.source.splitlines()[0]}
                    for s, c in timed[:5]
                ],
                "parameters": json.loads(last),
                "stderr_outputs": [o["text"][:300] for o in outputs if o.get("name") == "stderr"],
                "progress_widgets": sum(WIDGET in o.get("data", {}) for o in outputs),
                **info.figures(),
            }
        )
    )

    if args.executed is not None:
        nb.cells.pop()  # the results cell the bench added
        nbformat.write(nb, args.executed)


if __name__ == "__main__":
    main()
