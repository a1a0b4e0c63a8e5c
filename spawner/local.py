"""``ScaleLabSpawner``: single-user servers as local processes, configured for the course.

It extends JupyterHub's ``LocalProcessSpawner``. With ``home_root`` set (``scalelab up`` sets it),
users need no system account: each home is ``<home_root>/<username>`` and the server runs as the
hub's own user. With ``home_root`` empty, servers run as the system user of the same name, as with
``LocalProcessSpawner``.

GPUs (:mod:`scalelab.spawner.gpu_spawner`): the student picks a profile in the spawn form; the
server gets the granted GPUs' UUIDs in ``CUDA_VISIBLE_DEVICES``, or an empty value, which hides
every GPU from a CPU-only server.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Dict, List, Unicode, default

from scalelab import envvars
from scalelab.kernels.livy import LivySettings, livy_environment
from scalelab.spawner.environment import server_args, server_environment
from scalelab.spawner.gpu_spawner import GPUSpawnerMixin
from scalelab.spawner.homes import make_home
from scalelab.spawner.server_logs import ServerLogMixin, server_log_path


class ScaleLabSpawner(GPUSpawnerMixin, ServerLogMixin, LocalProcessSpawner):
    """Spawner of ScaleLab's single-user servers (local processes)."""

    home_root = Unicode(
        "",
        config=True,
        help="""Folder that holds users' homes as `<home_root>/<username>`, created on first start.

        Empty (the default): use the system account's home and run the server as that user,
        as LocalProcessSpawner does. `scalelab up` sets `<state dir>/homes`, so no system accounts
        are needed. Example: `c.ScaleLabSpawner.home_root = "/srv/scalelab/homes"`.
        """,
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
        file system, e.g. `{"endpoint_url": "http://127.0.0.1:8333"}` for S3). Passed to servers
        as JSON in SCALELAB_STORE_OPTIONS. Default: none.
        """,
    )

    spark_master = Unicode(
        "local[*]",
        config=True,
        help="""Spark master of the PySpark kernel's session: `local[*]` (every core of the
        server's machine), `spark://host:7077`, `yarn`, `k8s://...`.""",
    )

    spark_driver_memory = Unicode(
        "1g",
        config=True,
        help="""Default Spark driver memory of the PySpark kernel (`spark.driver.memory`), a JVM
        size such as `512m` or `2g`; students may pick another of
        `spark_driver_memory_choices` in the spawn form. In local mode the executors live in
        the driver, so this is Spark's whole heap.""",
    )

    kernelspec_path = List(
        Unicode(),
        config=True,
        help="""Jupyter data folders that hold ScaleLab's kernelspecs (`<dir>/kernels/<name>/`),
        put first on the server's JUPYTER_PATH. `scalelab up` writes them to
        `<state dir>/share/jupyter`. Empty: the kernelspecs installed with the server's Python.""",
    )

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        # The hub's own interpreter: the server gets ScaleLab's Python whatever PATH says.
        return [sys.executable, "-m", "jupyterhub.singleuser"]

    @default("default_url")
    def _default_default_url(self) -> str:
        return "/lab"

    @property
    def home_dir(self) -> str:
        """The user's home: under ``home_root`` when set, else the system account's home."""
        if not self.home_root:
            import pwd

            return pwd.getpwnam(self.user.name).pw_dir
        root = Path(self.home_root).resolve()
        home = (root / self.user.name).resolve()
        if home.parent != root:
            raise ValueError(f"user name {self.user.name!r} does not make a home under {root}")
        return str(home)

    def make_preexec_fn(self, name):
        if not self.home_root:
            return super().make_preexec_fn(name)
        home = self.home_dir

        def preexec() -> None:
            os.makedirs(home, 0o700, exist_ok=True)
            os.chdir(home)

        return preexec

    def user_env(self, env):
        if not self.home_root:
            return super().user_env(env)
        env["USER"] = self.user.name
        env["HOME"] = self.home_dir
        env["SHELL"] = "/bin/bash"
        return env

    async def move_certs(self, paths):
        if not self.home_root:
            return await super().move_certs(paths)
        return paths

    def get_env(self):
        if not self.store_url:
            raise ValueError(
                "c.ScaleLabSpawner.store_url is not set: configure the course store URL "
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
        if self.server_log_dir and self.home_root and not self.name:
            # Servers run as the hub's user here: their live-log folder (the Spark drivers'
            # logs, which the student's log page reads) is the one ops read at the hub too.
            env[envvars.LOG_DIR] = str(server_log_path(self.server_log_dir, self.user.name).parent)
        return env

    def get_args(self):
        args = [*super().get_args(), *server_args()]
        if self.home_root and os.geteuid() == 0:
            # Servers run as the hub's own user in home_root mode; jupyter_server refuses root
            # unless told, and a hub run by root (a container, CI) is that case.
            args.append("--allow-root")
        return args

    async def start(self):
        if self.home_root:
            make_home(self.home_root, self.user.name)
        return await super().start()
