"""The distributed hyperparameter search (``scalelab.kernels.search``, issue 15).

The pure parts run on Hyperopt's own serial ``Trials`` (no Spark); the search itself runs in a
real PySpark kernel on its local session, each trial a Spark task in a Python worker of its
own, and is interrupted there.

The parts that need no running service: ``tests/unit/test_search.py``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from scalelab.store import open_store
from tests.support.kernelrun import Kernel

#: A search in the kernel: 8 trials, 2 at a time, each a Spark task; one trial fails.
SEARCH = """
from hyperopt import hp
from scalelab.kernels.search import spark_search

def objective(params):
    import os
    if params["x"] > 3.8:
        raise ValueError("diverged")
    loss = (params["x"] - 1) ** 2 + (0 if params["act"] == "tanh" else 1)
    return {"loss": loss, "status": "ok", "pid": os.getpid()}

space = {"x": hp.uniform("x", -4, 4), "act": hp.choice("act", ["relu", "tanh"])}
result = spark_search(objective, space, max_evals=8, parallelism=2, store=store,
                      name="toy", seed=1)
"""


CHECK = """
import json
print(json.dumps({"best": result.best, "best_loss": result.best_loss,
                  "counts": result.counts(), "path": result.path,
                  "saved": json.loads(store.cat_file(result.path))}))
"""


def _last_json(out: dict) -> dict:
    return json.loads(out["stdout"].strip().splitlines()[-1])


def test_search_in_the_kernel_runs_trials_as_spark_tasks_and_saves_them(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = {**kernel_environment, "USER": "tester"}
    env.pop("JUPYTERHUB_USER", None)
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run(SEARCH, timeout_s=300)
        assert out["error"] is None, out
        assert out["stdout"].splitlines()[-1].startswith("ScaleLab: search 'toy': 8 done"), out
        assert not out["stderr"].strip(), out["stderr"]  # nothing red under the cell
        kernel_pid = int(kernel.run("import os; os.getpid()")["result"])
        check = kernel.run(CHECK)
    assert check["error"] is None, check
    found = _last_json(check)
    assert found["path"] == "home/tester/searches/toy.json"
    assert sum(found["counts"].values()) == 8
    saved = found["saved"]
    assert saved["best"] == found["best"] and found["best"]["act"] in {"relu", "tanh"}
    ok = [t for t in saved["trials"] if t["status"] == "ok"]
    assert found["best_loss"] == min(t["loss"] for t in ok)
    for trial in saved["trials"]:
        if trial["state"] == "error":
            assert trial["error"].endswith("ValueError: diverged")
    assert all(t["result"]["pid"] != kernel_pid for t in ok)  # in Spark's Python workers
    # And the file is in the course store itself, where the student's drive shows it.
    store = open_store(kernel_environment["SCALELAB_STORE_URL"])
    assert json.loads(store.cat_file("home/tester/searches/toy.json"))["name"] == "toy"


#: Trials that sleep until interrupted; each writes a file when it starts.
SLOW = """
from hyperopt import hp
from scalelab.kernels.search import spark_search

def objective(params, marker={marker!r}):
    import os, time, pathlib
    pathlib.Path(marker, str(os.getpid())).touch()
    time.sleep(600)
    return params["x"]

spark_search(objective, {{"x": hp.uniform("x", 0, 1)}}, max_evals=4, parallelism=2,
             store=store, name="slow")
"""


AFTER = """
import json, time
for _ in range(60):  # the cancelled jobs' tasks end
    if not sc.statusTracker().getActiveJobsIds():
        break
    time.sleep(0.5)
print(json.dumps({"active": sc.statusTracker().getActiveJobsIds(),
                  "saved": json.loads(store.cat_file("home/tester/searches/slow.json")),
                  "next": spark.range(5).count()}))
"""


def test_interrupting_the_cell_cancels_the_running_trials(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = {**kernel_environment, "USER": "tester"}
    env.pop("JUPYTERHUB_USER", None)
    marker = tmp_path / "started"
    marker.mkdir()
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:

        def interrupt_when_both_trials_run() -> None:
            for _ in range(1200):
                if len(list(marker.iterdir())) >= 2:
                    break
                time.sleep(0.25)
            # What JupyterLab's interrupt does to an ipykernel (interrupt_mode "signal"), sent
            # from this thread without the kernel manager's event loop.
            os.kill(kernel.km.provisioner.pid, signal.SIGINT)

        interrupter = threading.Thread(target=interrupt_when_both_trials_run)
        interrupter.start()
        out = kernel.run(SLOW.format(marker=str(marker)), timeout_s=400)
        interrupter.join()
        after = kernel.run(AFTER, timeout_s=120)
    assert out["error"] is not None and out["error"][0] == "KeyboardInterrupt", out
    assert "ScaleLab: interrupted: search 'slow'" in out["stdout"]
    assert after["error"] is None, after
    found = _last_json(after)
    assert found["active"] == []  # no trial left running in Spark
    assert found["next"] == 5  # the session works on
    saved = found["saved"]
    assert saved["cancelled"] == "fmin run cancelled by user"
    assert saved["best"] is None and saved["trials"]
    assert all(t["state"] in {"cancelled", "new", "running"} for t in saved["trials"])
    # The trials' Python workers were stopped, not left sleeping out their 600 s.
    for pid in (int(p.name) for p in marker.iterdir()):
        assert _ends(pid), f"trial worker {pid} still runs"


def _ends(pid: int) -> bool:
    """Whether process ``pid`` is gone within a minute (Spark kills a cancelled task's worker
    after ``spark.python.task.killTimeout``, 2 s)."""
    import psutil

    for _ in range(240):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.25)
    return False
