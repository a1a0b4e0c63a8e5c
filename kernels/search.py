"""A distributed hyperparameter search from the notebook: each trial a Spark task.

:func:`spark_search` runs Hyperopt's ``fmin`` with ``SparkTrials`` on the kernel's own session
(up to ``parallelism`` trials at once), saves the trials and the best one as JSON in the
student's home in the store, says in one line what happened, and returns the best parameters.
Why: docs/design-notes.md, scalelab.kernels.search.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: Search names become file names in the student's home.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

#: Hyperopt's trial states (``hyperopt.base.JOB_STATE_*``) as the words the results use.
STATES = {0: "new", 1: "running", 2: "done", 3: "error", 4: "cancelled"}


@dataclass
class SearchResult:
    """What :func:`spark_search` found.

    ``best``: the best trial's parameters as values (None when no trial finished with status
    ``ok``); ``best_loss``: its loss; ``trials``: one dict per trial (:func:`trial_records`);
    ``path``: where the JSON lies in the store; ``cancelled``: the reason the search stopped
    early (``"fmin run cancelled by user"``, ``"fmin run timeout"``) or None.
    """

    name: str
    best: dict[str, Any] | None
    best_loss: float | None
    trials: list[dict[str, Any]] = field(default_factory=list)
    path: str = ""
    cancelled: str | None = None

    def counts(self) -> dict[str, int]:
        """Trials per state: ``{"done": 14, "error": 1, "cancelled": 1}``."""
        out: dict[str, int] = {}
        for trial in self.trials:
            out[trial["state"]] = out.get(trial["state"], 0) + 1
        return out

    def summary(self) -> str:
        """One line: the trials per state, the best loss and parameters, and the file."""
        counts = ", ".join(f"{n} {state}" for state, n in sorted(self.counts().items()))
        stop = f" (stopped early: {self.cancelled})" if self.cancelled else ""
        if self.best is None:
            found = "no trial finished with status ok"
        else:
            found = f"best loss {self.best_loss:.6g} with {self.best}"
        return f"search {self.name!r}: {counts or 'no trials'}{stop}; {found}; saved to {self.path}"


def trial_records(trials: Any, space: Any) -> list[dict[str, Any]]:
    """Hyperopt's trial documents as plain, JSON-ready dicts, in trial order.

    Parameters
    ----------
    trials
        A ``hyperopt.Trials`` (or ``SparkTrials``) after ``fmin``.
    space
        The search space given to ``fmin``: parameters are turned into values with
        ``hyperopt.space_eval`` (an ``hp.choice`` gives the chosen value, not its index).

    Returns
    -------
    list of dict
        ``tid``; ``state`` (one of :data:`STATES`' words); ``params``; ``loss`` (float or None);
        ``status`` (the objective's, ``"ok"``/``"fail"``, or None); ``seconds`` (book to
        refresh time, or None); ``error`` (the exception's type and last line, or None); and
        the objective's other JSON-ready result keys under ``result``.
    """
    from hyperopt import space_eval

    records = []
    # ``trials.trials`` leaves out failed and cancelled trials (Hyperopt's ``refresh`` keeps the
    # valid states only); its counters (``count_by_state_unsynced``) read them all from here.
    for trial in getattr(trials, "_dynamic_trials", trials.trials):
        vals = {k: v[0] for k, v in trial["misc"].get("vals", {}).items() if v}
        try:
            params = space_eval(space, vals)
        except Exception:  # noqa: BLE001 -- a trial cancelled before its values were drawn
            params = vals
        result = dict(trial.get("result") or {})
        loss = result.pop("loss", None)
        status = result.pop("status", None)
        error = trial["misc"].get("error")
        booked, refreshed = trial.get("book_time"), trial.get("refresh_time")
        seconds = (refreshed - booked).total_seconds() if booked and refreshed else None
        records.append(
            {
                "tid": trial["tid"],
                "state": STATES.get(trial["state"], str(trial["state"])),
                "params": _json_ready(params),
                "loss": None if loss is None or not math.isfinite(loss) else float(loss),
                "status": status,
                "seconds": seconds,
                "error": _error_line(error),
                "result": _json_ready(result),
            }
        )
    return records


def best_trial(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The finished trial with status ``ok`` and the lowest loss (the first of equals), or None."""
    finished = [
        r for r in records if r["state"] == "done" and r["status"] == "ok" and r["loss"] is not None
    ]
    return min(finished, key=lambda r: r["loss"]) if finished else None


def default_home(environ: Mapping[str, str]) -> str:
    """The student's home in the store: ``home/<JUPYTERHUB_USER>`` (else ``$USER``)."""
    user = environ.get("JUPYTERHUB_USER") or environ.get("USER") or "me"
    return f"home/{user}"


def spark_search(
    objective: Callable[[Any], Any],
    space: Any,
    *,
    max_evals: int,
    store: Any,
    name: str,
    parallelism: int | None = None,
    timeout_s: float | None = None,
    seed: int = 0,
    algo: Callable[..., Any] | None = None,
    spark: Any = None,
    home: str | None = None,
) -> SearchResult:
    """Search ``space`` for the parameters that minimise ``objective``, each trial a Spark task.

    Parameters
    ----------
    objective
        ``objective(params) -> loss`` (a float) or Hyperopt's result dict (``{"loss": ...,
        "status": "ok", ...}``). It runs in an executor's Python worker, pickled with
        cloudpickle: import inside it, and read its data from the store passed to it.
    space
        A Hyperopt search space (``hp.uniform``, ``hp.loguniform``, ``hp.choice``...).
    max_evals
        How many trials in all (>= 1).
    store
        The kernel's ``store``: the results go to ``<home>/searches/<name>.json`` in it.
    name
        The search's name: letters, digits, ``.``, ``_``, ``-`` (a file name).
    parallelism
        Trials at once (Spark tasks); None: Spark's default parallelism, at most 128
        (Hyperopt's cap).
    timeout_s
        Seconds after which running trials are cancelled and the best so far is returned.
    seed
        Seeds TPE's proposals (``rstate``): the same seed proposes the same first trials.
    algo
        Hyperopt's ``suggest`` function (default ``hyperopt.tpe.suggest``).
    spark
        The SparkSession (default: the active one, the kernel's ``spark``).
    home
        The student's home in the store (default :func:`default_home` of the environment).

    Returns
    -------
    SearchResult
        Also printed as one line (:meth:`SearchResult.summary`).

    Raises
    ------
    ValueError
        ``max_evals`` < 1, or ``name`` is not a plain file name.
    KeyboardInterrupt
        The cell was interrupted: the running trials are cancelled (their Spark job group), the
        finished ones saved first.
    """
    import numpy as np
    from hyperopt import fmin, tpe
    from hyperopt.base import JOB_STATE_CANCEL, JOB_STATE_NEW
    from hyperopt.exceptions import AllTrialsFailed
    from hyperopt.spark import FMIN_CANCELLED_REASON_USER, SparkTrials

    if max_evals < 1:
        raise ValueError(f"max_evals must be at least 1 (got {max_evals})")
    if not _NAME.match(name):
        raise ValueError(
            f"search name {name!r} is not a plain file name: use letters, digits, '.', '_' "
            "or '-', e.g. name='lr-search'"
        )
    home = default_home(os.environ) if home is None else home.rstrip("/")
    path = f"{home}/searches/{name}.json"
    if spark is None:
        from pyspark.sql import SparkSession

        # Not SparkTrials' own ``builder.getOrCreate()``: it warns "Using an existing Spark
        # session" under the cell. ``active()`` waits for the kernel's ``spark`` being built.
        spark = SparkSession.active()
    # Hyperopt's own INFO/WARNING lines ("Total Trials: ...", "fmin is cancelled ...") would be
    # red under the cell and say what ScaleLab's one line says; a failed trial's ERROR stays.
    logging.getLogger("hyperopt-spark").setLevel(logging.ERROR)
    trials = SparkTrials(parallelism=parallelism, timeout=timeout_s, spark_session=spark)
    group = f"scalelab-search-{name}-{uuid.uuid4().hex[:8]}"
    failure: list[BaseException] = []
    done = threading.Event()  # not Thread.is_alive(): an interrupted join() can leave it False

    def search() -> None:
        # SparkTrials runs its trials in the job group of the thread that calls fmin.
        spark.sparkContext.setJobGroup(group, f"ScaleLab search {name!r}", True)
        try:
            fmin(
                objective,
                space,
                algo=algo or tpe.suggest,
                max_evals=max_evals,
                trials=trials,
                rstate=np.random.default_rng(seed),
                show_progressbar=False,
                return_argmin=False,
            )
        except AllTrialsFailed:
            pass  # no trial finished with status ok: the records say why each failed
        except BaseException as exc:  # noqa: BLE001 -- raised again in the cell's thread
            failure.append(exc)
        finally:
            done.set()

    # fmin runs in a thread of its own so that an interrupt reaches the cell's thread here,
    # not SparkTrials, which on KeyboardInterrupt waits for the running trials to finish.
    thread = threading.Thread(target=search, name=f"scalelab-search-{name}", daemon=True)
    thread.start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        # What SparkTrials does at its timeout: fmin stops proposing (it reads this flag), and
        # the running trials' Spark jobs are cancelled (their Python workers killed).
        trials._fmin_cancelled = True
        trials._fmin_cancelled_reason = FMIN_CANCELLED_REASON_USER
        for trial in trials.trials:  # queued trials: SparkTrials' dispatcher must not start them
            if trial["state"] == JOB_STATE_NEW:
                trial["state"] = JOB_STATE_CANCEL
        _cancel_until_done(spark.sparkContext, group, done)
        result = _save(store, path, name, trials, space)
        print(f"ScaleLab: interrupted: {result.summary()}", flush=True)
        raise
    if failure:
        raise failure[0]
    result = _save(store, path, name, trials, space)
    print(f"ScaleLab: {result.summary()}", flush=True)
    return result


def _cancel_until_done(sc: Any, group: str, done: threading.Event) -> None:
    """Cancel job group ``group`` until the search is ``done``: a trial thread may still be
    submitting its job at the first cancel. A second interrupt while this waits (seconds: Spark
    kills a cancelled task's Python worker after ``spark.python.task.killTimeout``, 2 s) is
    ignored with a line."""
    tracker = sc.statusTracker()
    while not done.is_set():
        if set(tracker.getJobIdsForGroup(group)) & set(tracker.getActiveJobsIds()):
            sc.cancelJobGroup(group)  # (Spark warns at a group with no active job)
        try:
            done.wait(0.5)
        except KeyboardInterrupt:
            print("ScaleLab: stopping the search's trials...", flush=True)


def _save(store: Any, path: str, name: str, trials: Any, space: Any) -> SearchResult:
    """Records of ``trials``, the best one, written as JSON to ``path`` in ``store``."""
    records = trial_records(trials, space)
    best = best_trial(records)
    result = SearchResult(
        name=name,
        best=None if best is None else best["params"],
        best_loss=None if best is None else best["loss"],
        trials=records,
        path=path,
        cancelled=trials.fmin_cancelled_reason,
    )
    store.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    store.pipe_file(path, json.dumps(asdict(result), indent=1).encode())
    return result


def _error_line(error: Any) -> str | None:
    """``(type, traceback text)`` of a failed or cancelled trial as ``Type: last line``."""
    if not error:
        return None
    kind, text = error
    kind = re.sub(r"^<class '(.*)'>$", r"\1", str(kind))
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return f"{kind}: {lines[-1]}" if lines else kind


def _json_ready(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and anything else unknown as its repr."""
    try:
        return json.loads(json.dumps(value, default=_plain))
    except (TypeError, ValueError):
        return repr(value)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return repr(value)
