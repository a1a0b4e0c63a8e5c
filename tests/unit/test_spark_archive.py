"""The Spark driver's class-data archive (kernels/spark_archive.py): the options that map it.
Its use by a real kernel's driver: tests/integration/spark/test_spark_kernel.py."""

from __future__ import annotations

from pathlib import Path

from scalelab.kernels import spark_archive
from scalelab.kernels.spark_session import driver_conf


def test_the_driver_maps_the_archive_when_there_is_one_and_never_says_so(tmp_path: Path):
    archive = tmp_path / "spark-driver.jsa"
    assert spark_archive.java_options(archive) == []  # not built: nothing to map
    archive.write_bytes(b"archive")
    assert spark_archive.java_options(archive) == [
        f"-XX:SharedArchiveFile={archive}",
        "-Xlog:cds*=off",  # a JVM that cannot use it loads from the jars, silently
    ]
    spaced = tmp_path / "a folder" / "spark-driver.jsa"
    spaced.parent.mkdir()
    spaced.write_bytes(b"archive")
    assert spark_archive.java_options(spaced)[0] == f'"-XX:SharedArchiveFile={spaced}"'


def test_the_archive_options_come_before_the_drivers_own():
    conf = driver_conf(tmp_dir="/tmp/x", archive_options=["-XX:SharedArchiveFile=/a.jsa"])
    assert conf["spark.driver.extraJavaOptions"] == (
        "-XX:SharedArchiveFile=/a.jsa -Djava.io.tmpdir=/tmp/x"
    )
