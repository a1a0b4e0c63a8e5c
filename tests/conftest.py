"""Markers from folders, and shared fixtures: the real data sets (../shared/data), a course store,
ScaleLab's kernelspecs, the HDFS and YARN test cluster (``tests/support/hadoopcluster.py``) and
the Slurm test cluster (``tests/support/slurmcluster.py``).

A test's folder is its kind (CONTRIBUTING.md, "Tests by kind"): ``unit/`` (no marker),
``integration/<engine>/`` (``integration`` and the engine: ``hub``, ``spark``, ``hadoop``, ``s3``,
``slurm``, ``kube``), ``browser/`` (``browser``), ``labs/`` (``lab``); ``support/`` holds the
harnesses. A unit test that carries a kind's marker is an error at collection.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalelab.kernels import install_kernelspecs
from scalelab.store import DATASETS, fetch_dataset, open_store
from tests.support.hadoopcluster import HadoopTestCluster, running_cluster
from tests.support.slurmcluster import DEBIAN_PACKAGES, SlurmTestCluster, missing_commands
from tests.support.sparkcluster import standalone_cluster
from tests.support.workgroups import GroupScheduling, start_rank

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: The markers each folder gives its tests (``integration/<engine>/`` adds the engine's too).
FOLDER_MARKERS = {
    "unit": (),
    "integration": ("integration",),
    "browser": ("browser",),
    "labs": ("lab",),
}
#: Every marker that names a kind of test or an engine (pyproject.toml declares them).
KIND_MARKERS = frozenset(
    {"integration", "browser", "lab", "hub", "spark", "hadoop", "s3", "slurm", "kube"}
)
#: The course's real data sets, beside the repository (see ../shared/data/README.md).
SHARED_DATA = REPO.parent / "shared" / "data"
#: The suite's Spark drivers' JVM options (``SPARK_SUBMIT_OPTS``, read by ``spark-submit``):
#: the JIT's first tier only (C1), for them and, as ``spark.*`` system properties their
#: SparkConf reads, for their executors and YARN application masters. The suite starts many
#: short-lived JVMs on 2 cores, where C2's compiling costs more CPU than it wins back (4 of
#: test_spark_kernel.py's tests: 75 CPU seconds instead of 117). An environment variable, not a
#: ``SPARK_CONF_DIR``: a folder on the driver's class path keeps its JVM from mapping ScaleLab's
#: class-data archive (kernels/spark_archive.py). Test configuration only, not ScaleLab's.
SPARK_SUBMIT_OPTS = " ".join(
    [
        "-XX:TieredStopAtLevel=1",
        "-Dspark.executor.defaultJavaOptions=-XX:TieredStopAtLevel=1",
        "-Dspark.yarn.am.extraJavaOptions=-XX:TieredStopAtLevel=1",
    ]
)


def pytest_configure(config: pytest.Config) -> None:
    """Every Spark the tests start, in this process or below it, takes the suite's JVM options
    (the test hubs pass ``SPARK_SUBMIT_OPTS`` on to their servers)."""
    os.environ["SPARK_SUBMIT_OPTS"] = SPARK_SUBMIT_OPTS


def folder_markers(path: Path) -> tuple[str, ...]:
    """The markers of a test file at ``path`` under ``tests/``, from its folder.

    Raises ``pytest.UsageError`` for a test file outside the kinds' folders.
    """
    parts = path.resolve().relative_to(TESTS).parts
    if len(parts) < 2 or parts[0] not in FOLDER_MARKERS:
        raise pytest.UsageError(
            f"{path}: a test file belongs in one of tests/{{{','.join(FOLDER_MARKERS)}}}/"
        )
    if parts[0] == "integration":
        if len(parts) < 3 or parts[1] not in KIND_MARKERS:
            raise pytest.UsageError(f"{path}: integration tests go in tests/integration/<engine>/")
        return ("integration", parts[1])
    return FOLDER_MARKERS[parts[0]]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its folder's markers, start the long units of work first
    (``tests/support/workgroups.py``); refuse a unit test marked as another kind."""
    items.sort(key=lambda item: start_rank(item.nodeid))  # stable: file order kept within
    wrong = []
    for item in items:
        markers = folder_markers(Path(item.path))
        for name in markers:
            item.add_marker(name)
        if not markers and KIND_MARKERS & {m.name for m in item.iter_markers()}:
            wrong.append(item.nodeid)
    if wrong:
        raise pytest.UsageError(
            "unit tests marked as another kind (move them to its folder): " + ", ".join(wrong)
        )


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log) -> GroupScheduling | None:
    """``--dist loadgroup`` (pyproject.toml) with the suite's units of work."""
    return GroupScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


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
def slurm_cluster() -> Iterator[SlurmTestCluster]:
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
    # Outside pytest's own temporary folder (its user's alone): the students' cluster accounts
    # of test_slurm_sudo.py read slurm.conf and reach MUNGE's socket, as on a real cluster.
    root = Path(tempfile.mkdtemp(prefix="scalelab-slurm-"))
    root.chmod(0o755)
    cluster = SlurmTestCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


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
    asks (``tests/support/sparkcluster.py``); yields the master's URL."""
    with standalone_cluster(tmp_path_factory.mktemp("cluster"), workers=2) as master:
        yield master
