"""Which tests one pytest-xdist worker runs together, and which start first.

A test file is one unit of work (its module fixtures are made once), with four exceptions:
every file whose tests take the ``hdfs_cluster`` fixture is in the unit ``hadoop-cluster`` (one
HDFS and YARN test cluster a run), every file whose tests or fixtures take ``slurm_cluster`` in
``slurm-cluster`` (one Slurm test cluster a run), every file that makes students' system users
(``tests.support.sysusers``) in ``system-users`` (they make and remove the same users), and each
test of ``labs/`` is a unit of its own (a lab's run shares nothing with another's).

pytest-xdist 3.8's own ``xdist_group`` marker does not group on pytest 9 (it renames the node
id, which pytest 9 no longer reads), so the suite's scheduler (:class:`GroupScheduling`) reads
the units from the node ids and the files themselves.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

TESTS = Path(__file__).resolve().parents[1]
#: Units that start first, longest first (minutes each in ``--durations``): the run ends
#: sooner when no worker is left alone with one of them at the end.
FIRST = (
    "labs/", "hadoop-cluster", "slurm-cluster", "system-users", "browser/", "integration/hadoop/",
    "integration/spark/",
)  # fmt: skip

#: The session fixture of each test cluster, and the unit of the files that take it.
CLUSTER_UNITS = {"hdfs_cluster": "hadoop-cluster", "slurm_cluster": "slurm-cluster"}


@functools.cache
def _file_unit(relative: str) -> str:
    """The unit of the test file at ``relative`` (to ``tests/``), from its source."""
    tree = ast.parse((TESTS / relative).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.module == "tests.support.sysusers"
            or (node.module == "tests.support" and any(a.name == "sysusers" for a in node.names))
        ):
            return "system-users"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in node.args.args:
                if arg.arg in CLUSTER_UNITS:
                    return CLUSTER_UNITS[arg.arg]
    return relative


def unit_of(nodeid: str) -> str:
    """The unit of work of the test ``nodeid`` (``tests/<file>::<name>``)."""
    path = nodeid.split("::", 1)[0]
    relative = path.removeprefix("tests/")
    if relative.startswith("labs/"):
        return nodeid
    return _file_unit(relative)


def start_rank(nodeid: str) -> int:
    """0 for the units that start first (in :data:`FIRST`'s order), then the rest."""
    unit = unit_of(nodeid).removeprefix("tests/")
    for rank, prefix in enumerate(FIRST):
        if unit.startswith(prefix):
            return rank
    return len(FIRST)


class GroupScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with :func:`unit_of` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
