"""Start-up validation of ScaleLab's GPU configuration, and the spawn form's rendering."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from scalelab.spawner.gpu_spawner import format_wait, validate_config


def _config(**sections) -> Config:
    c = Config()
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(c, section), key, value)
    return c


def test_good_configuration_passes():
    validate_config(
        _config(GPUPolicy={"max_gpus_per_user": 2}, ScaleLabSpawner={"profiles": [{"slug": "cpu"}]})
    )


@pytest.mark.parametrize(
    ("sections", "error", "message"),
    [
        ({"GPUPolicy": {"max_gpus_per_usr": 2}}, TraitError, "unknown setting"),
        ({"ScaleLabSpawner": {"profiles": [{"slug": "cpu", "gpu": 1}]}}, ValueError, "unknown key"),
        ({"ScaleLabSpawner": {"declared_gpus": [{"name": "x"}]}}, ValueError, "needs a 'uuid'"),
        ({"ScaleLabSpawner": {"spark_driver_memory_choices": ["lots"]}}, ValueError, "sizes like"),
    ],
)
def test_misspelt_or_bad_gpu_configuration_stops_the_hub_at_start(sections, error, message):
    with pytest.raises(error, match=message):
        validate_config(_config(**sections))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "under a minute"),
        (25 * 60, "about 25 min"),
        (5400, "about 1.5 h"),
        (float("inf"), "unknown"),
    ],
)
def test_wait_is_said_in_words(seconds, text):
    assert format_wait(seconds) == text
