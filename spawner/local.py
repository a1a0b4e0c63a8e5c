"""``ScaleLabSpawner``: single-user servers as local processes, configured for the course.

It extends JupyterHub's ``LocalProcessSpawner``. With ``home_root`` set (``scalelab up`` sets it),
users need no system account: each home is ``<home_root>/<username>`` and the server runs as the
hub's own user. With ``home_root`` empty, servers run as the system user of the same name, as with
``LocalProcessSpawner``.

GPUs: the inventory comes from NVML (:mod:`scalelab.spawner.inventory`). Until GPU profiles are
configured, every server is CPU-only and ``CUDA_VISIBLE_DEVICES`` is empty, which hides any GPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from scalelab.spawner.environment import server_args, server_environment
from scalelab.spawner.inventory import GPUInventory, discover_gpus
from traitlets import Dict, List, Unicode, default


class ScaleLabSpawner(LocalProcessSpawner):
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
        help="""Spark driver memory of the PySpark kernel (`spark.driver.memory`), a JVM size such
        as `512m` or `2g`. In local mode the executors live in the driver, so this is Spark's
        whole heap.""",
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

    _inventory: GPUInventory | None = None

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

    async def gpu_inventory(self) -> GPUInventory:
        """The host's GPUs, discovered once per hub through NVML in a thread; logged once."""
        cls = type(self)
        if cls._inventory is None:
            cls._inventory = await discover_gpus()
            inv = cls._inventory
            if inv.gpus:
                names = ", ".join(f"{g.index}: {g.name} ({g.uuid})" for g in inv.gpus)
                self.log.info("ScaleLab found %d GPU(s) through NVML: %s", len(inv.gpus), names)
            else:
                self.log.info("ScaleLab runs CPU-only: no GPU found (%s)", inv.reason)
        return cls._inventory

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
                spark_driver_memory=self.spark_driver_memory,
                gpu_uuids=(),
                jupyter_path=self.kernelspec_path,
                inherited_jupyter_path=env.get("JUPYTER_PATH", ""),
            )
        )
        return env

    def get_args(self):
        args = [*super().get_args(), *server_args()]
        if self.home_root and os.geteuid() == 0:
            # Servers run as the hub's own user in home_root mode; jupyter_server refuses root
            # unless told, and a hub run by root (a container, CI) is that case.
            args.append("--allow-root")
        return args

    async def start(self):
        await self.gpu_inventory()
        if self.home_root:
            os.makedirs(self.home_dir, 0o700, exist_ok=True)
        return await super().start()
