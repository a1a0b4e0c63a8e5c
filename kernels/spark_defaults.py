"""Spark's defaults for ScaleLab, in one place (pure; no PySpark import).

The spawner's settings (``ScaleLabSpawner.spark_master``, ``.spark_driver_memory``,
``.spark_driver_memory_choices``), ``scalelab doctor`` and the PySpark kernel all read them
here, so the hub and a kernel started without the hub's variables agree.
"""

from __future__ import annotations

#: Spark master when the hub set none: every core of the server's machine.
DEFAULT_SPARK_MASTER = "local[*]"
#: Spark driver memory (``spark.driver.memory``, a JVM size) when the hub set none.
DEFAULT_DRIVER_MEMORY = "1g"
#: Driver memory sizes students may pick in the spawn form; the first is the default.
DEFAULT_DRIVER_MEMORY_CHOICES = ("1g", "2g", "4g")
#: A barrier stage (``TorchDistributor``'s ranks, ``rdd.barrier()``) that needs more task slots
#: than the cluster has is retried every interval, so many times, before it fails: Spark's
#: defaults (15 s, 40) keep the cell waiting 10 minutes; these fail it in about 30 s, still
#: long enough for executors that are registering to count.
BARRIER_CHECK = {
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "15",
}


def spark_conf(master: str, driver_memory: str, app_name: str) -> dict[str, str]:
    """Spark settings of the PySpark kernel's session (pure).

    Parameters
    ----------
    master
        ``spark.master``, e.g. ``"local[*]"`` or ``"spark://host:7077"``.
    driver_memory
        ``spark.driver.memory``, a JVM size such as ``"2g"``.
    app_name
        ``spark.app.name``, shown in Spark's UI.

    Returns
    -------
    dict
        ``spark.*`` keys -> values, for ``SparkSession.builder.config``. The driver binds to
        loopback in local mode, so the session works on a machine with no resolvable host name.
        A barrier stage that can never start fails in about 30 s (:data:`BARRIER_CHECK`).
    """
    conf = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.driver.memory": driver_memory,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **BARRIER_CHECK,
    }
    if master.startswith("local"):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def security_conf(master: str, secret: str) -> dict[str, str]:
    """Spark's own authentication and RPC encryption for a session ScaleLab starts (pure).

    Every connection to the driver (its RPC endpoint and block manager) must then prove the
    application's secret (``spark.authenticate``) and is AES-encrypted
    (``spark.network.crypto.enabled``): code that reaches the driver's ports cannot read cached
    blocks, upload blocks or send it RPCs. In local mode the secret is ``secret``, new per
    application; on YARN Spark makes one per application and hands it to the executors itself.
    For a standalone or Kubernetes master the cluster's own setting decides (its workers must
    share the secret): nothing is set. Shuffle and spill files are not encrypted
    (``spark.io.encryption.enabled`` costs CPU on every shuffle); they lie in the server's own
    temporary folder. Source: Spark's docs, "Security" (RPC authentication and encryption).

    Returns
    -------
    dict
        ``spark.*`` keys -> values, empty for a master whose cluster decides.
    """
    if master.startswith("local"):
        return {
            "spark.authenticate": "true",
            "spark.authenticate.secret": secret,
            "spark.network.crypto.enabled": "true",
        }
    if master == "yarn":
        return {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
    return {}
