"""Start-up validation of the spawner's settings (GPU and course), and waits in words."""

from __future__ import annotations

import pytest
from jupyterhub.spawner import LocalProcessSpawner
from traitlets import TraitError
from traitlets.config import Config

from scalelab.common.strictconfig import UnknownSettingError
from scalelab.spawner import ScaleLabSpawner
from scalelab.spawner.course import CourseSpawnerMixin
from scalelab.spawner.gpu_spawner import format_wait
from scalelab.spawner.validation import validate_spawner_config


def _config(**sections) -> Config:
    c = Config()
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(c, section), key, value)
    return c


def test_good_configuration_passes():
    validate_spawner_config(
        _config(GPUPolicy={"max_gpus_per_user": 2}, ScaleLabSpawner={"profiles": [{"slug": "cpu"}]})
    )


@pytest.mark.parametrize(
    ("sections", "error", "message"),
    [
        ({"GPUPolicy": {"max_gpus_per_usr": 2}}, TraitError, "unknown setting"),
        ({"ScaleLabSpawner": {"profiles": [{"slug": "cpu", "gpu": 1}]}}, ValueError, "unknown key"),
        ({"ScaleLabSpawner": {"declared_gpus": [{"name": "x"}]}}, ValueError, "needs a 'uuid'"),
        (
            {"ScaleLabSpawner": {"declared_gpus": [{"uuid": "GPU-a", "nme": "x"}]}},
            ValueError,
            r"declared_gpus\[0\] has unknown key\(s\) \['nme'\]; allowed: "
            r"\['memory_mib', 'name', 'uuid'\]",
        ),
        ({"ScaleLabSpawner": {"declared_gpus": ["GPU-a"]}}, ValueError, "must be a dict like"),
        ({"ScaleLabSpawner": {"spark_driver_memory_choices": ["lots"]}}, ValueError, "sizes like"),
    ],
)
def test_misspelt_or_bad_gpu_configuration_stops_the_hub_at_start(sections, error, message):
    with pytest.raises(error, match=message):
        validate_spawner_config(_config(**sections))


@pytest.mark.parametrize(
    ("section", "key", "message"),
    [
        (
            "ScaleLabSpawner",
            "store_ulr",
            "c.ScaleLabSpawner has unknown setting(s) ['store_ulr'] "
            "(did you mean 'store_ulr' -> 'store_url'?)",
        ),
        (
            "CourseSpawnerMixin",
            "spark_mastr",
            "c.CourseSpawnerMixin has unknown setting(s) ['spark_mastr'] "
            "(did you mean 'spark_mastr' -> 'spark_master'?)",
        ),
        (
            "GPUSpawnerMixin",
            "declared_gpu",
            "c.GPUSpawnerMixin has unknown setting(s) ['declared_gpu'] "
            "(did you mean 'declared_gpu' -> 'declared_gpus'?)",
        ),
        (
            "ServerLogMixin",
            "no_such_thing",
            "c.ServerLogMixin has unknown setting(s) ['no_such_thing']",
        ),
    ],
)
def test_a_misspelt_setting_in_any_scalelab_section_of_the_spawner_is_refused(
    section, key, message
):
    with pytest.raises(UnknownSettingError) as caught:
        validate_spawner_config(_config(**{section: {key: 1}}))
    assert str(caught.value) == message


def test_jupyterhubs_own_settings_and_sections_stay_jupyterhubs():
    c = _config(
        ScaleLabSpawner={"start_timeout": 300, "http_timeout": 90, "store_url": "file:///s"},
        Spawner={"not_ours_to_judge": 1},
        LocalProcessSpawner={"nor_this": 1},
    )
    validate_spawner_config(c)
    validate_spawner_config(c, ScaleLabSpawner)


class OperatorsSpawner(CourseSpawnerMixin, LocalProcessSpawner):
    """An operator's own spawner class with the course layer."""


def test_an_operators_spawner_class_is_checked_by_its_own_name_and_the_mixins():
    good = _config(OperatorsSpawner={"store_url": "file:///s", "start_timeout": 60})
    validate_spawner_config(good, OperatorsSpawner)
    with pytest.raises(UnknownSettingError, match=r"c\.OperatorsSpawner has unknown setting"):
        validate_spawner_config(_config(OperatorsSpawner={"stor_url": "x"}), OperatorsSpawner)
    with pytest.raises(UnknownSettingError, match=r"c\.CourseSpawnerMixin has unknown setting"):
        validate_spawner_config(_config(CourseSpawnerMixin={"home_root": "/x"}), OperatorsSpawner)
    # profiles are read from every section of the class, as traitlets reads them
    with pytest.raises(ValueError, match="unknown key"):
        validate_spawner_config(
            _config(CourseSpawnerMixin={"profiles": [{"slug": "cpu", "gpu": 1}]}),
            OperatorsSpawner,
        )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "no_such_module.Source",
            "c.ScaleLabSpawner.gpu_source_class = 'no_such_module.Source' cannot be imported",
        ),
        (
            "scalelab.spawner.policy.GPUPolicy",
            "c.ScaleLabSpawner.gpu_source_class = 'scalelab.spawner.policy.GPUPolicy' is not a "
            "scalelab.common.gpu_source.GPUSource",
        ),
    ],
)
def test_a_gpu_source_class_that_is_not_one_stops_the_hub_at_start(value, message):
    with pytest.raises(ValueError, match=message):
        validate_spawner_config(_config(ScaleLabSpawner={"gpu_source_class": value}))


def test_the_gpu_source_own_section_is_checked_too():
    c = _config(
        ScaleLabSpawner={"gpu_source_class": "tests.support.fake_gpus.FileReadingsGPUs"},
        FileReadingsGPUs={"readings_fil": "utilization.json"},
    )
    with pytest.raises(UnknownSettingError) as caught:
        validate_spawner_config(c)
    assert str(caught.value) == (
        "c.FileReadingsGPUs has unknown setting(s) ['readings_fil'] "
        "(did you mean 'readings_fil' -> 'readings_file'?)"
    )
    with pytest.raises(UnknownSettingError, match=r"c\.NVMLGPUs has unknown setting"):
        validate_spawner_config(_config(NVMLGPUs={"anything": 1}))  # the default source


def test_the_course_sections_values_are_checked_too():
    with pytest.raises(ValueError, match="sizes like"):
        validate_spawner_config(
            _config(CourseSpawnerMixin={"spark_driver_memory_choices": ["lots"]})
        )
    with pytest.raises(ValueError, match="cannot be imported"):
        validate_spawner_config(
            _config(ScaleLabSpawner={"gpu_source_class": "no_such_module.Source"})
        )


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
