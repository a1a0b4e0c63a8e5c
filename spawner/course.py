"""The course layer: what makes a JupyterHub spawner start a ScaleLab course server.

:class:`CourseSpawnerMixin` owns every course setting of a spawner, whatever runs the servers:
the course store, Spark's master and driver memory, ScaleLab's kernelspecs and the kernel
allow-list, Livy, and GPUs (profiles, limits, queue and the GPU source, from
:class:`~scalelab.spawner.gpu_spawner.GPUSpawnerMixin`). It adds them to the server through the
standard ``Spawner`` hooks only, ``get_env()`` and ``get_args()``, so that it combines with any
JupyterHub spawner; put it first among the bases::

    from kubespawner import KubeSpawner
    from scalelab.spawner.course import CourseSpawnerMixin

    class CourseKubeSpawner(CourseSpawnerMixin, KubeSpawner):
        pass

    c.JupyterHub.spawner_class = CourseKubeSpawner
    c.CourseKubeSpawner.store_url = "s3://course-bucket/course"

:class:`~scalelab.spawner.local.ScaleLabSpawner` is this layer over JupyterHub's
``LocalProcessSpawner``. :func:`scalelab.spawner.validation.validate_spawner_config` checks a
spawner class's settings in a hub configuration before the hub starts.
"""

from __future__ import annotations

from traitlets import Dict, List, Unicode, default

from scalelab.kernels.livy import LivySettings, livy_environment
from scalelab.kernels.spark_defaults import (
    DEFAULT_DRIVER_MEMORY,
    DEFAULT_DRIVER_MEMORY_CHOICES,
    DEFAULT_SPARK_MASTER,
)
from scalelab.spawner.environment import server_args, server_environment
from scalelab.spawner.gpu_spawner import GPUSpawnerMixin
from scalelab.spawner.profiles import check_memory_choices


class CourseSpawnerMixin(GPUSpawnerMixin):
    """Course store, Spark, kernels, Livy and GPUs for any JupyterHub spawner class.

    Put it first among the bases: ``class MySpawner(CourseSpawnerMixin, KubeSpawner)``. Its
    settings are set under the spawner class's name (``c.MySpawner.store_url``).
    """

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
        file system, e.g. `{"endpoint_url": "http://127.0.0.1:8333"}` for S3). Passed to servers
        as JSON in SCALELAB_STORE_OPTIONS. Default: none.
        """,
    )

    spark_master = Unicode(
        DEFAULT_SPARK_MASTER,
        config=True,
        help="""Spark master of the PySpark kernel's session: `local[*]` (every core of the
        server's machine), `spark://host:7077`, `yarn`, `k8s://...`.""",
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

    @default("default_url")
    def _default_default_url(self) -> str:
        return "/lab"

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
        JUPYTER_PATH, granted GPUs, GPU session deadline, Livy).

        Raises
        ------
        ValueError
            ``store_url`` is not set.
        """
        if not self.store_url:
            raise ValueError(
                f"c.{type(self).__name__}.store_url is not set: configure the course store URL "
                "(e.g. file:///srv/course)."
            )
        env = super().get_env()
        env.update(
            server_environment(
                store_url=self.store_url,
                store_options=self.store_options,
                spark_master=self.spark_master,
                spark_driver_memory=(
                    self._request.spark_driver_memory if self._request else self.spark_driver_memory
                ),
                gpu_uuids=self.gpu_uuids,
                jupyter_path=self.kernelspec_path,
                inherited_jupyter_path=env.get("JUPYTER_PATH", ""),
            )
        )
        env.update(self.session_environment())
        env.update(livy_environment(LivySettings(parent=self)))
        return env

    def get_args(self) -> list[str]:
        """The backend's server arguments, plus ScaleLab's kernel allow-list (the launcher shows
        ScaleLab's kernels only; the PySpark one is the default)."""
        return [*super().get_args(), *server_args()]
