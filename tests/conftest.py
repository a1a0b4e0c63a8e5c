"""Shared fixtures: the real data sets (../shared/data), a course store, ScaleLab's kernelspecs,
the HDFS and YARN test cluster (``tests/hadoopcluster.py``) and the Slurm test cluster
(``tests/slurmcluster.py``)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalelab.kernels import install_kernelspecs
from scalelab.store import DATASETS, fetch_dataset, open_store
from tests.hadoopcluster import HadoopTestCluster, running_cluster
from tests.slurmcluster import DEBIAN_PACKAGES, SlurmTestCluster, missing_commands
from tests.sparkcluster import standalone_cluster

REPO = Path(__file__).resolve().parents[1]
#: The course's real data sets, beside the repository (see ../shared/data/README.md).
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``: the real Fashion-MNIST and Million Song files."""
    if not (SHARED_DATA / "SHA256SUMS").is_file():
        pytest.fail(f"the course data sets are missing: expected them in {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def course_store(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> str:
    """URL of a local course store holding both data sets, fetched from the shared mirror."""
    url = (tmp_path_factory.mktemp("store") / "course").as_uri()
    fs = open_store(url)
    for spec in DATASETS.values():
        fetch_dataset(spec, fs, mirror=shared_data, log=lambda _line: None)
    return url


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Jupyter data folder holding ScaleLab's kernelspecs only."""
    data_dir = tmp_path_factory.mktemp("jupyter") / "share" / "jupyter"
    install_kernelspecs(data_dir)
    return data_dir


@pytest.fixture
def kernel_environment(
    monkeypatch: pytest.MonkeyPatch, kernels_dir: Path, course_store: str
) -> dict[str, str]:
    """The environment a ScaleLab server gives its kernels, for kernels started by the test."""
    extra = {
        "JUPYTER_PATH": str(kernels_dir),
        "SCALELAB_STORE_URL": course_store,
        "SCALELAB_STORE_OPTIONS": "{}",
        "SCALELAB_SPARK_MASTER": "local[2]",
        "SCALELAB_SPARK_DRIVER_MEMORY": "1g",
        "SCALELAB_GPUS": "",
        "CUDA_VISIBLE_DEVICES": "",
    }
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **extra}


@pytest.fixture(scope="session")
def hdfs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HadoopTestCluster]:
    """The test cluster, HDFS and YARN with 2 NodeManagers in one JVM, started once per test run
    (about 20 s) and stopped at its end; its ``conf_dir`` is the ``HADOOP_CONF_DIR`` (and
    ``YARN_CONF_DIR``) of both.

    Skips, naming the fix (``./install.sh``), where it is not built or there is no Java; fails
    every test that uses it, with the JVM's last lines, where it is built but does not start.
    """
    yield from running_cluster(tmp_path_factory.mktemp("hdfs-cluster"), nodemanagers=2)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmTestCluster]:
    """A real Slurm (munged, slurmctld, slurmd ``n1`` and ``n2``, 2 GPUs each as GRES), started
    once per test run (about 6 s with its accounting: MariaDB and slurmdbd) and stopped at its
    end, also when tests fail.

    Skips, naming the fix, without Debian's Slurm packages or without root; fails every test
    that uses it, with the daemons' last log lines, where the cluster does not come up.
    """
    missing = missing_commands()
    if missing:
        pytest.skip(
            f"Slurm is not installed ({', '.join(missing)} not found): ./install.sh installs "
            f"Debian's {DEBIAN_PACKAGES}"
        )
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root (slurmd, mknod of its GPU device nodes)")
    cluster = SlurmTestCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def _collect_leaks_in_the_test_that_made_them(request: pytest.FixtureRequest):
    """After each test that runs real servers, collect garbage at once.

    A socket or file a test forgets to close is only reported (a ResourceWarning, an error here)
    when the garbage collector finds it, which may be several tests later; collecting at the
    end of the test names the one that leaked.
    """
    yield
    if any(any(request.node.iter_markers(name)) for name in ("integration", "browser", "lab")):
        gc.collect()


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and two workers of 1 core and 1 GiB each, for the module that
    asks (``tests/sparkcluster.py``); yields the master's URL."""
    with standalone_cluster(tmp_path_factory.mktemp("cluster"), workers=2) as master:
        yield master
