"""``ScaleLabSpawner``: course servers as local processes (the course layer over
JupyterHub's ``LocalProcessSpawner``).

With ``home_root`` set (``scalelab up`` sets it), users need no system account: each home is
``<home_root>/<username>`` and the server runs as the hub's own user. With ``home_root`` empty,
servers run as the system user of the same name, as with ``LocalProcessSpawner``.

Everything else -- the course store, Spark, kernels, Livy, GPUs (the student picks a profile in
the spawn form; the server gets the granted GPUs' UUIDs in ``CUDA_VISIBLE_DEVICES``, or an empty
value, which hides every GPU from a CPU-only server) -- is the course layer's,
:class:`~scalelab.spawner.course.CourseSpawnerMixin`, which any other JupyterHub spawner can use.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Unicode, default

from scalelab import envvars
from scalelab.spawner.course import CourseSpawnerMixin
from scalelab.spawner.homes import make_home
from scalelab.spawner.server_logs import ServerLogMixin, server_log_path


class ScaleLabSpawner(CourseSpawnerMixin, ServerLogMixin, LocalProcessSpawner):
    """Spawner of ScaleLab's single-user servers as local processes.

    The course settings (store, Spark, kernels, Livy, GPUs) are
    :class:`~scalelab.spawner.course.CourseSpawnerMixin`'s, set as ``c.ScaleLabSpawner.*``;
    this class adds only what local processes need: homes under ``home_root``, the hub's Python
    as the server's, ``--allow-root`` for a hub run by root, and the servers' log files.
    """

    home_root = Unicode(
        "",
        config=True,
        help="""Folder that holds users' homes as `<home_root>/<username>`, created on first start.

        Empty (the default): use the system account's home and run the server as that user,
        as LocalProcessSpawner does. `scalelab up` sets `<state dir>/homes`, so no system accounts
        are needed. Example: `c.ScaleLabSpawner.home_root = "/srv/scalelab/homes"`.
        """,
    )

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        # The hub's own interpreter: the server gets ScaleLab's Python whatever PATH says.
        return [sys.executable, "-m", "jupyterhub.singleuser"]

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
        env = super().get_env()
        if self.server_log_dir and self.home_root and not self.name:
            # Servers run as the hub's user here: their live-log folder (the Spark drivers'
            # logs, which the student's log page reads) is the one ops read at the hub too.
            env[envvars.LOG_DIR] = str(server_log_path(self.server_log_dir, self.user.name).parent)
        return env

    def get_args(self):
        args = super().get_args()
        if self.home_root and os.geteuid() == 0:
            # Servers run as the hub's own user in home_root mode; jupyter_server refuses root
            # unless told, and a hub run by root (a container, CI) is that case.
            args.append("--allow-root")
        return args

    async def start(self):
        if self.home_root:
            make_home(self.home_root, self.user.name)
        return await super().start()
