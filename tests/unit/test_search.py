"""The distributed hyperparameter search (``scalelab.kernels.search``, issue 15): the parts that
need no running hub, kernel or cluster. The rest runs for real in
``tests/integration/spark/test_search.py``.
"""

from __future__ import annotations

import json

import pytest
from hyperopt import STATUS_FAIL, STATUS_OK, Trials, fmin, hp, tpe

from scalelab.kernels.search import best_trial, default_home, spark_search, trial_records

SPACE = {"x": hp.uniform("x", -4, 4), "act": hp.choice("act", ["relu", "tanh"])}


def _objective(params: dict) -> dict:
    if params["x"] > 3.5:
        raise ValueError("x too large for this model")
    if params["x"] < -3.5:
        return {"status": STATUS_FAIL}
    penalty = 0.0 if params["act"] == "tanh" else 1.0
    return {"loss": (params["x"] - 1) ** 2 + penalty, "status": STATUS_OK, "epochs": 3}


def _serial_trials(evals: int = 40) -> Trials:
    import numpy as np

    trials = Trials()
    fmin(
        _objective,
        SPACE,
        algo=tpe.suggest,
        max_evals=evals,
        trials=trials,
        rstate=np.random.default_rng(3),
        show_progressbar=False,
        catch_eval_exceptions=True,
        return_argmin=False,
    )
    return trials


def test_records_give_values_losses_and_states():
    records = trial_records(_serial_trials(), SPACE)
    tids = [r["tid"] for r in records]
    assert tids == list(range(40))  # failed ones too
    assert {r["params"]["act"] for r in records} <= {"relu", "tanh"}  # values, not indices
    done = [r for r in records if r["status"] == STATUS_OK]
    assert done and all(r["state"] == "done" and r["result"] == {"epochs": 3} for r in done)
    for r in done:
        penalty = 0.0 if r["params"]["act"] == "tanh" else 1.0
        assert r["loss"] == pytest.approx((r["params"]["x"] - 1) ** 2 + penalty)
    json.dumps(records)  # JSON-ready


def test_a_failing_trial_is_recorded_with_its_error_line():
    records = trial_records(_serial_trials(60), SPACE)
    errors = [r for r in records if r["state"] == "error"]
    assert errors, "TPE drew no x > 3.5 in 60 trials"
    assert errors[0]["error"] == "ValueError: x too large for this model"
    assert all(r["loss"] is None for r in errors)


def test_best_is_the_lowest_ok_loss():
    records = [
        {"state": "done", "status": "ok", "loss": 2.0, "params": {"x": 1}},
        {"state": "done", "status": "fail", "loss": None, "params": {"x": 2}},
        {"state": "error", "status": None, "loss": None, "params": {"x": 3}},
        {"state": "done", "status": "ok", "loss": 0.5, "params": {"x": 4}},
        {"state": "cancelled", "status": None, "loss": None, "params": {"x": 5}},
    ]
    assert best_trial(records)["params"] == {"x": 4}
    assert best_trial(records[1:3]) is None


def test_home_is_the_hub_users():
    assert default_home({"JUPYTERHUB_USER": "alice", "USER": "jovyan"}) == "home/alice"
    assert default_home({"USER": "bob"}) == "home/bob"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_evals": 0, "name": "ok"}, "max_evals must be at least 1"),
        ({"max_evals": 2, "name": "../escape"}, "not a plain file name"),
        ({"max_evals": 2, "name": ""}, "not a plain file name"),
    ],
)
def test_bad_arguments_are_refused_before_spark_is_touched(kwargs, match):
    with pytest.raises(ValueError, match=match):
        spark_search(_objective, SPACE, store=None, spark=None, **kwargs)
