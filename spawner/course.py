"""The course layer: what makes a JupyterHub spawner start a ScaleLab course server.

:class:`CourseSpawnerMixin` owns every course setting of a spawner (store, Spark, kernelspecs,
Livy, GPUs) and adds them through ``get_env()`` and ``get_args()`` only, so that it combines
with any JupyterHub spawner: put it first among the bases.
Why: docs/design-notes.md, scalelab.spawner.course.
"""

from __future__ import annotations

import asyncio
import os

from jupyterhub.spawner import SpawnException
from traitlets import CaselessStrEnum, Dict, Integer, List, Type, Unicode, default

from scalelab.kernels.livy import LivySettings, livy_environment
from scalelab.kernels.spark_defaults import (
    DEFAULT_DRIVER_MEMORY,
    DEFAULT_DRIVER_MEMORY_CHOICES,
    DEFAULT_SPARK_MASTER,
)
from scalelab.spawner.environment import server_args, server_environment
from scalelab.spawner.gpu_spawner import GPUSpawnerMixin
from scalelab.spawner.profiles import check_memory_choices
from scalelab.spawner.store_identity import (
    SharedStoreIdentity,
    StoreIdentity,
    leaked_credentials,
)

#: jupyter-server-proxy's server extension (its generic ``proxy/<port>`` route).
SERVER_PROXY = "jupyter_server_proxy"


class CourseSpawnerMixin(GPUSpawnerMixin):
    """Course store, Spark, kernels, Livy and GPUs for any JupyterHub spawner class.

    Put it first among the bases: ``class MySpawner(CourseSpawnerMixin, KubeSpawner)``. Its
    settings are set under the spawner class's name (``c.MySpawner.store_url``).
    """

    kernel_transport = CaselessStrEnum(
        ["ipc", "tcp"],
        "ipc",
        config=True,
        help="""How a server and its kernels talk (ZeroMQ's transport,
        `--KernelManager.transport`). `ipc` (the default): Unix sockets in the server's private
        runtime folder (0700, the student's own; on Slurm a folder of the job on its node's
        /tmp, removed when the job ends), which no other user can connect to. `tcp`: ports on
        127.0.0.1, which any user of the host (or Slurm node) can connect to: a ZeroMQ SUB
        socket on a kernel's iopub port receives every cell's input and output (messages are
        signed, not hidden). With `ipc` the runtime folder's path must leave room for the
        sockets' names within Linux's 107 characters: a local server whose would not does not
        start, and says so (`runtime_parent`).""",
    )

    store_url = Unicode(
        "",
        config=True,
        help="""URL of the course store, any fsspec protocol: `file:///srv/course`,
        `hdfs://namenode:8020/course`, `s3://bucket/course`. Servers and kernels get it as
        SCALELAB_STORE_URL and reach it through `scalelab.store.open_store()`. Required.
        """,
    )

    store_options = Dict(
        config=True,
        help="""fsspec `storage_options` of the course store (keyword arguments of the protocol's
        file system, e.g. `{"endpoint_url": "http://127.0.0.1:8333"}` for S3): the hub's own.
        Each server gets them as JSON in SCALELAB_STORE_OPTIONS as `store_identity_class` makes
        them for its student (by default unchanged). Default: none.
        """,
    )

    store_identity_class = Type(
        default_value=SharedStoreIdentity,
        klass=StoreIdentity,
        config=True,
        help="""Who each student's server is to the course store: a subclass of
        `scalelab.spawner.store_identity.StoreIdentity`, or its import path.
        `SharedStoreIdentity` (the default): every server gets the hub's `store_options`, so
        only the guard in the student's own process keeps them out of other homes (no
        store-side enforcement; a `file://` store is protected by file permissions when servers
        run as system users). `S3KeyFile`: each server gets its student's own S3 key from
        `c.S3KeyFile.key_file`, never the hub's. `HDFSUserIdentity`: the student's name as the
        HDFS user (`c.HDFSUserIdentity.mode`). The class's own settings are
        `c.<ClassName>.<setting>`.""",
    )

    spark_master = Unicode(
        DEFAULT_SPARK_MASTER,
        config=True,
        help="""Spark master of the PySpark kernel's session: `local[*]` (every core of the
        server's machine), `spark://host:7077`, `yarn` (client mode; set `hadoop_conf_dir`,
        and executors' sizes in `spark_conf`), `k8s://...`.""",
    )

    spark_conf = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        config=True,
        help="""Further Spark settings of the PySpark kernel's session (`spark.*` keys, string
        values), e.g. for YARN `{"spark.executor.instances": "4", "spark.executor.memory":
        "2g", "spark.executor.memoryOverhead": "1g", "spark.yarn.queue": "course"}`. Servers
        get them as JSON in SCALELAB_SPARK_CONF; they win over ScaleLab's own defaults (with
        `spark_master = "yarn"`: client mode, `spark.yarn.jars` local to the NodeManagers), but
        `spark.master` and `spark.driver.memory` are `spark_master` and the student's
        `spark_driver_memory`. Default: none.""",
    )

    hadoop_conf_dir = Unicode(
        "",
        config=True,
        help="""The Hadoop cluster's client configuration folder (`core-site.xml`,
        `hdfs-site.xml`, `yarn-site.xml`), given to servers and kernels as HADOOP_CONF_DIR and
        YARN_CONF_DIR: Spark on YARN (`spark_master = "yarn"`) finds the ResourceManager there,
        and `hdfs://` the namenodes. Empty: the servers' environment decides.""",
    )

    spark_kernel_idle_timeout = Integer(
        3600,
        min=0,
        config=True,
        help="""Seconds after which an idle PySpark kernel (no cell run, no output) is stopped,
        with a browser tab open or not, so that its Spark application gives its executors
        (YARN containers, a standalone cluster's cores) back; the student's next kernel tells
        them why. Other kernels are never stopped for idleness. 0: never.""",
    )

    spark_driver_memory = Unicode(
        DEFAULT_DRIVER_MEMORY,
        config=True,
        help="""Default Spark driver memory of the PySpark kernel (`spark.driver.memory`), a JVM
        size such as `512m` or `2g`; students may pick another of
        `spark_driver_memory_choices` in the spawn form. In local mode the executors live in
        the driver, so this is Spark's whole heap.""",
    )

    spark_driver_memory_choices = List(
        Unicode(),
        default_value=list(DEFAULT_DRIVER_MEMORY_CHOICES),
        config=True,
        help="""Spark driver memory sizes students may pick (JVM sizes); the default is
        `spark_driver_memory` when it is one of them, else the first.""",
    )

    kernelspec_path = List(
        Unicode(),
        config=True,
        help="""Jupyter data folders that hold ScaleLab's kernelspecs (`<dir>/kernels/<name>/`),
        put first on the server's JUPYTER_PATH. `scalelab up` writes them to
        `<state dir>/share/jupyter`. Empty: the kernelspecs installed with the server's Python.""",
    )

    _store_identity: StoreIdentity | None = None

    @default("default_url")
    def _default_default_url(self) -> str:
        return "/lab"

    @property
    def store_identity(self) -> StoreIdentity:
        """The ``store_identity_class`` of this spawner, made once with it as parent."""
        cls = self.store_identity_class
        if type(self._store_identity) is not cls:
            self._store_identity = cls(parent=self)
        return self._store_identity

    def server_store(self) -> tuple[dict, dict[str, str]]:
        """The storage options of this server's store, and the environment variables its
        identity adds (:attr:`store_identity`).

        Raises
        ------
        jupyterhub.spawner.SpawnException
            The identity cannot be made for the student (see the identity class).
        """
        identity = self.store_identity
        user = self.user.name
        return (
            identity.server_store_options(user, self.store_url, dict(self.store_options)),
            identity.server_environment(user, self.store_url),
        )

    async def prepare_store_home(self) -> None:
        """Have :attr:`store_identity` make the student's home in the store where the store needs
        the hub to (an HDFS home owned by the student), in a thread.

        Raises
        ------
        jupyterhub.spawner.SpawnException
            It could not be made (the hub's log says why).
        """
        await asyncio.to_thread(
            self.store_identity.prepare_home,
            self.user.name,
            self.store_url,
            dict(self.store_options),
        )

    def _refuse_hub_credential(self, env: dict[str, str]) -> None:
        """With an identity the store enforces, refuse a server environment that holds one of
        the hub's store secrets (from ``c.Spawner.environment`` or ``env_keep``)."""
        if not self.store_identity.enforced:
            return
        leaks = leaked_credentials(env, self.store_options, os.environ)
        if not leaks:
            return
        problem = (
            f"the hub's store credential would be in {self.user.name}'s server environment "
            f"({', '.join(leaks)}): remove it from c.Spawner.environment and env_keep, since "
            f"{type(self.store_identity).__name__} gives each server a credential of its own"
        )
        self.log.error("Store identity: %s", problem)
        raise SpawnException(
            "Your server cannot start: its store configuration is unsafe; ask the course's "
            "operators (the hub's log says what to fix).",
            reason="store-identity",
            log_message=problem,
        )

    def spark_memory_offer(self) -> tuple[list[str], str]:
        """The Spark driver memory sizes of the spawn form, and the default one.

        Returns
        -------
        tuple
            (``spark_driver_memory_choices``, ``spark_driver_memory`` when it is one of them,
            else the first choice).

        Raises
        ------
        ValueError
            A choice that is not a JVM size, or no choice at all.
        """
        choices = check_memory_choices(self.spark_driver_memory_choices)
        chosen = self.spark_driver_memory
        return choices, chosen if chosen in choices else choices[0]

    def get_env(self) -> dict[str, str]:
        """The server's environment: the backend's, plus the course's (store, Spark, kernels'
        JUPYTER_PATH, granted GPUs, GPU session deadline, Livy). The store's options are
        those :attr:`store_identity` makes for the student.

        Raises
        ------
        ValueError
            ``store_url`` is not set.
        jupyterhub.spawner.SpawnException
            The store identity cannot be made for the student; or, with an identity the store
            enforces, one of the hub's store secrets would be in the server's environment
            (e.g. through ``c.Spawner.environment``); the hub's log names the variables.
        """
        if not self.store_url:
            raise ValueError(
                f"c.{type(self).__name__}.store_url is not set: configure the course store URL "
                "(e.g. file:///srv/course)."
            )
        env = super().get_env()
        store_options, store_env = self.server_store()
        env.update(store_env)
        env.update(
            server_environment(
                store_url=self.store_url,
                store_options=store_options,
                spark_master=self.spark_master,
                spark_driver_memory=(
                    self._request.spark_driver_memory if self._request else self.spark_driver_memory
                ),
                spark_conf=self.spark_conf,
                hadoop_conf_dir=self.hadoop_conf_dir,
                gpu_uuids=self.gpu_uuids,
                jupyter_path=self.kernelspec_path,
                inherited_jupyter_path=env.get("JUPYTER_PATH", ""),
            )
        )
        env.update(self.session_environment())
        env.update(self.gpu_report_environment())
        env.update(livy_environment(LivySettings(parent=self)))
        self._refuse_hub_credential(env)
        return env

    def own_network(self) -> bool:
        """Whether this server has a network namespace of its own, which no other student's
        server shares (a pod; a local server in its sandbox). Here: no (a Slurm job shares its
        node's)."""
        return False

    def get_args(self) -> list[str]:
        """The backend's server arguments, plus ScaleLab's kernel allow-list (the launcher shows
        ScaleLab's kernels only; the PySpark one is the default), the culling of idle PySpark
        kernels (``spark_kernel_idle_timeout``) and the kernels' transport
        (``kernel_transport``). Without a network of its own (:meth:`own_network`) the
        server's jupyter-server-proxy extension is off: its ``proxy/<port>`` route would carry
        the student's requests, cookies included, to whatever listens on that port of a
        loopback other students share (ScaleLab's own ``sparkui/<port>`` route reaches only
        the server's own kernels' Spark UIs)."""
        culling = server_args(spark_kernel_idle_timeout=self.spark_kernel_idle_timeout)
        args = [*super().get_args(), *culling]
        if not self.own_network():
            args.append(f"--ServerApp.jpserver_extensions={SERVER_PROXY}=False")
        return [*args, f"--KernelManager.transport={self.kernel_transport.lower()}"]
