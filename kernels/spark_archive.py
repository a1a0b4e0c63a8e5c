"""A class-data archive of the Spark driver (JDK AppCDS): the PySpark kernel's driver JVM maps
Spark's classes already parsed and verified instead of loading them from the jars.

:func:`build` writes the archive (a driver run with ``-XX:ArchiveClassesAtExit``: ``install.sh``
runs ``python -m scalelab.kernels.spark_archive``); :func:`java_options` gives the driver's
options to use it, silently ignored by a JVM that cannot (another Java, a configuration folder
on the class path). Measured on 2 cores (docs/benchmarks.md, "The driver's class-data
archive"): a local driver's session and first jobs took 14-16 CPU seconds with it, 22-24
without.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: Where the archive lives: in the Python environment the kernels run (one per Spark and Java;
#: a JVM of another version ignores it), readable by every student, written by the installer.
ARCHIVE = Path(sys.prefix) / "share" / "scalelab" / "spark-driver.jsa"
#: What the archive is built from: a local driver with its UI, the warm kernel's jobs, a
#: DataFrame aggregation, Parquet written and read back, and a pandas conversion through Arrow.
WORKLOAD = """
import sys, tempfile
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("scalelab-archive")
         .config("spark.driver.extraJavaOptions", sys.argv[1]).getOrCreate())
for _ in range(5):
    spark.range(3).count()
df = spark.createDataFrame([(i, f"k{i % 3}", i * 0.5) for i in range(100)], ["id", "key", "x"])
df.groupBy("key").agg({"x": "avg", "id": "max"}).orderBy("key").collect()
with tempfile.TemporaryDirectory() as folder:
    df.write.parquet(folder + "/t")
    spark.read.parquet(folder + "/t").filter("x > 3").select("key").distinct().count()
spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
df.limit(10).toPandas()
spark.stop()
"""
#: Environment variables that put folders on the driver's class path, which an archive cannot
#: have (a JDK 17 archive takes jars only): the build runs without them.
CLASS_PATH_FOLDERS = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_SUBMIT_OPTS")


def java_options(archive: Path = ARCHIVE) -> list[str]:
    """The driver's JVM options that map ``archive``, or none when it is not there (pure but
    for the file's existence). The JVM's own messages about an archive it cannot use (another
    Java's, a folder on the class path) are turned off: it then loads from the jars as without
    one."""
    if not archive.is_file():
        return []
    path = str(archive)
    option = (
        f'"-XX:SharedArchiveFile={path}"'
        if any(c.isspace() for c in path)
        else (f"-XX:SharedArchiveFile={path}")
    )
    return [option, "-Xlog:cds*=off"]


def build(archive: Path = ARCHIVE, timeout_s: float = 900.0) -> Path:
    """Write ``archive`` from a driver run of :data:`WORKLOAD` (about 30 s on 2 cores; the file
    is about 150 MiB), replacing an older one only once the new one is whole.

    Raises
    ------
    RuntimeError
        The driver run failed or wrote no archive; the message has its output's end.
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in CLASS_PATH_FOLDERS}
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".archive-") as folder:
        partial = Path(folder) / archive.name
        run = subprocess.run(
            [sys.executable, "-c", WORKLOAD, f"-XX:ArchiveClassesAtExit={partial}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if run.returncode != 0 or not partial.is_file():
            tail = (run.stdout + run.stderr)[-2000:]
            raise RuntimeError(f"the Spark driver's archive was not written:\n{tail}")
        partial.chmod(0o644)
        os.replace(partial, archive)
    return archive


if __name__ == "__main__":
    print(f"wrote {build()}")
