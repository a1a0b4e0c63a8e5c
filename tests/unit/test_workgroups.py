"""The suite's own rules: each test file's markers from its folder, and the units of work that
one pytest-xdist worker runs together (``tests/support/workgroups.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import TESTS, folder_markers
from tests.support.workgroups import FIRST, start_rank, unit_of


@pytest.mark.parametrize(
    ("relative", "markers"),
    [
        ("unit/test_gpu_ledger.py", ()),
        ("integration/hub/test_gpu_hub.py", ("integration", "hub")),
        ("integration/hadoop/test_spark_yarn.py", ("integration", "hadoop")),
        ("browser/test_browser.py", ("browser",)),
        ("labs/test_labs.py", ("lab",)),
    ],
)
def test_a_files_folder_gives_its_markers(relative: str, markers: tuple[str, ...]):
    assert folder_markers(TESTS / relative) == markers


@pytest.mark.parametrize(
    "relative", ["test_somewhere.py", "integration/test_no_engine.py", "integration/gpu/test_x.py"]
)
def test_a_file_outside_the_kinds_folders_is_refused(relative: str):
    with pytest.raises(pytest.UsageError, match="tests/"):
        folder_markers(TESTS / relative)


def test_files_that_share_a_cluster_or_system_users_are_one_unit_and_each_lab_its_own():
    hadoop = "tests/integration/hadoop/test_torch_yarn.py::test_two_ranks"
    assert unit_of(hadoop) == "hadoop-cluster"  # takes hdfs_cluster
    assert unit_of("tests/integration/hadoop/test_spark_yarn.py::t") == "hadoop-cluster"
    # its own cluster, not the run's: a unit of its own
    kerberos = "tests/integration/hadoop/test_store_kerberos.py::t"
    assert unit_of(kerberos) == "integration/hadoop/test_store_kerberos.py"
    assert unit_of("tests/integration/hub/test_isolation.py::a") == "system-users"
    assert unit_of("tests/integration/s3/test_isolation_s3.py::b") == "system-users"
    # `from tests.support import sysusers` counts as well as `from tests.support.sysusers import`
    assert unit_of("tests/integration/hadoop/test_up_hadoop.py::c") == "system-users"
    # the hub fixture takes slurm_cluster: one Slurm test cluster for both files
    assert unit_of("tests/integration/slurm/test_slurm_hub.py::a") == "slurm-cluster"
    assert unit_of("tests/integration/slurm/test_slurm_sudo.py::b") == "slurm-cluster"
    lab1, lab2 = "tests/labs/test_labs.py::test_lab1", "tests/labs/test_labs.py::test_lab2"
    assert unit_of(lab1) != unit_of(lab2)
    assert unit_of("tests/unit/test_kube.py::x") == unit_of("tests/unit/test_kube.py::y")


def test_the_long_units_start_first_in_their_order():
    ranks = [
        start_rank("tests/labs/test_labs.py::test_lab2"),
        start_rank("tests/integration/hadoop/test_torch_yarn.py::t"),
        start_rank("tests/integration/slurm/test_slurm_hub.py::t"),
        start_rank("tests/integration/hadoop/test_up_hadoop.py::t"),  # a system-users file
        start_rank("tests/browser/test_browser.py::t"),
        start_rank("tests/integration/hadoop/test_store_kerberos.py::t"),
        start_rank("tests/integration/spark/test_spark_kernel.py::t"),
        start_rank("tests/unit/test_kube.py::t"),
    ]
    assert ranks == list(range(len(FIRST) + 1))
    assert Path(TESTS / "labs" / "test_labs.py").is_file()  # the names above are real files
