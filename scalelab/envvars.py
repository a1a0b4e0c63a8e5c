"""Names of the environment variables that carry the hub's configuration into servers and kernels.

One setting keeps one name along the whole path: the trait ``ScaleLabSpawner.store_url`` becomes
``SCALELAB_STORE_URL`` in the single-user server, where the server extension and kernels read it.
"""

#: Course store URL (``ScaleLabSpawner.store_url``), e.g. ``file:///srv/course`` or ``hdfs://nn:8020/course``.
STORE_URL = "SCALELAB_STORE_URL"
#: The store's fsspec ``storage_options`` as a JSON object (``ScaleLabSpawner.store_options``).
STORE_OPTIONS = "SCALELAB_STORE_OPTIONS"
#: Spark master of the PySpark kernel (``ScaleLabSpawner.spark_master``), e.g. ``local[*]``.
SPARK_MASTER = "SCALELAB_SPARK_MASTER"
#: Spark driver memory (``ScaleLabSpawner.spark_driver_memory``), a JVM size such as ``2g``.
SPARK_DRIVER_MEMORY = "SCALELAB_SPARK_DRIVER_MEMORY"
#: Further Spark settings of the PySpark kernel's session (``ScaleLabSpawner.spark_conf``), a
#: JSON object of ``spark.*`` keys to string values, e.g. ``{"spark.executor.memory": "2g"}``.
SPARK_CONF = "SCALELAB_SPARK_CONF"
#: NVML UUIDs of the GPUs the server holds, comma-separated; empty for CPU only.
GPUS = "SCALELAB_GPUS"
#: When the server's GPU session ends (seconds since the epoch); unset when unlimited.
GPU_DEADLINE = "SCALELAB_GPU_DEADLINE"
#: Seconds before the deadline from which kernels warn at each cell.
GPU_WARNING_S = "SCALELAB_GPU_WARNING_S"
#: Seconds between the server's reports of its GPUs' readings to the hub; unset: no reports
#: (the hub reads NVML itself). See :mod:`scalelab.hub_ext.server.gpu_report`.
GPU_REPORT_S = "SCALELAB_GPU_REPORT_S"
#: A folder laid out like ``shared/data`` that ``scalelab data fetch`` tries first.
DATA_MIRROR = "SCALELAB_DATA_MIRROR"
#: ``scalelab up``'s state folder (hub database, users' homes, the local store).
STATE_DIR = "SCALELAB_STATE_DIR"
#: Password of ``scalelab up``'s demo login; generated when unset.
PASSWORD = "SCALELAB_PASSWORD"
#: Folder of released labs (``scalelab labs release``'s DEST_DIR) delivered into homes instead of
#: the ones in the package, e.g. set by ``c.Spawner.environment``; unset: the package's.
LABS_DIR = "SCALELAB_LABS_DIR"
#: Folder of the live logs (server.log, spark-driver-<pid>.log); default ``$HOME/.scalelab/logs``.
LOG_DIR = "SCALELAB_LOG_DIR"
#: Livy settings for sparkmagic's remote kernels (``c.LivySettings``) as JSON; unset: none.
LIVY = "SCALELAB_LIVY"
#: File holding the latest notice to the student (set by the server extension for its kernels).
NOTICE_FILE = "SCALELAB_NOTICE_FILE"
#: The server's memory cgroup folder, set by the local spawner when the server has a cgroup of
#: its own: the server watches its OOM kills there (:mod:`scalelab.hub_ext.server.oom_watch`).
MEMORY_CGROUP = "SCALELAB_MEMORY_CGROUP"
#: The student's Kerberos principal on a Kerberos HDFS (``alice@EXAMPLE.ORG``), named in the
#: ``kinit`` command of a missing or expired ticket's message; set by ops
#: (``c.Spawner.environment``).
KERBEROS_PRINCIPAL = "SCALELAB_KERBEROS_PRINCIPAL"
#: The keytab of that principal (a path readable by the student's server), for the same message.
KERBEROS_KEYTAB = "SCALELAB_KERBEROS_KEYTAB"
#: Seconds a cell waits for a Spark application YARN keeps waiting (ACCEPTED) before the kernel
#: says what holds the queue; default 15. Set by ops (``c.Spawner.environment``).
YARN_WAIT_NOTICE_S = "SCALELAB_YARN_WAIT_NOTICE_S"
