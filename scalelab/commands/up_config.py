"""``scalelab up``'s embedded defaults, as a traitlets ``Config`` (pure: no I/O).

JupyterHub on loopback with SQLite, configurable-http-proxy, ScaleLab's spawner with homes under
the state folder, Spark ``local[*]``, a local folder as the course store and a shared-password
login. An operator's ``--config`` file is loaded after these defaults; the generated file ends
with ``scalelab.configure(c)``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from traitlets.config import Config

from scalelab.commands.state_files import StateFolder
from scalelab.commands.up_hadoop import HadoopService, spawner_config
from scalelab.kernels.spark_defaults import DEFAULT_SPARK_MASTER

#: User names ``scalelab up`` accepts at login (JupyterHub's ``Authenticator.username_pattern``,
#: matched after JupyterHub lowercases the name): lowercase letters, digits, ``.``, ``_``, ``-``,
#: starting with a letter or digit, 1 to 64 characters, so that each is a home folder name.
USERNAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


@dataclass(frozen=True)
class UpSettings:
    """Everything ``scalelab up`` decides before it starts the hub.

    Attributes
    ----------
    state_dir
        Folder for the hub database, cookie secret, users' homes, kernelspecs and logs.
    store_url
        The course store URL.
    proxy_command
        argv of configurable-http-proxy.
    ip, port
        Where the proxy serves users (default ``127.0.0.1:8000``).
    hub_port, proxy_api_port
        Internal ports of the hub and of the proxy's REST API, on ``127.0.0.1``.
    system_users
        A system user per student (``c.ScaleLabSpawner.system_users``), when run by root;
        False: every server runs as the hub's user (a single-user trial).
    hadoop
        ``--hadoop``: the Hadoop test cluster's service
        (:meth:`~scalelab.commands.up_hadoop.HadoopService.to_dict`), else None.
    """

    state_dir: str
    store_url: str
    proxy_command: list[str]
    hub_port: int
    proxy_api_port: int
    ip: str = "127.0.0.1"
    port: int = 8000
    system_users: bool = False
    hadoop: dict[str, Any] | None = None

    def to_json(self) -> str:
        """JSON form, for the generated ``jupyterhub_config.py``."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> UpSettings:
        """Inverse of :meth:`to_json`."""
        return cls(**json.loads(text))


def kernelspec_dir(state_dir: str | Path) -> Path:
    """Jupyter data folder where ``scalelab up`` writes the kernelspecs."""
    return StateFolder(Path(state_dir)).kernelspecs


def embedded_config(s: UpSettings, password: str) -> Config:
    """The hub configuration of ``scalelab up``.

    Parameters
    ----------
    s
        The run's settings.
    password
        The shared login password (at least 8 characters, JupyterHub's rule).

    Returns
    -------
    traitlets.config.Config
        ``JupyterHub``, ``ConfigurableHTTPProxy``, ``SharedPasswordAuthenticator`` and
        ``ScaleLabSpawner`` sections (without what :func:`scalelab.configure` adds).
    """
    state = StateFolder(Path(s.state_dir))
    c = Config()
    c.JupyterHub.ip = s.ip
    c.JupyterHub.port = s.port
    c.JupyterHub.hub_ip = "127.0.0.1"
    c.JupyterHub.hub_port = s.hub_port
    c.JupyterHub.db_url = f"sqlite:///{state.database}"
    c.JupyterHub.cookie_secret_file = str(state.cookie_secret)
    c.JupyterHub.pid_file = str(state.hub_pid)
    c.JupyterHub.cleanup_servers = True
    c.JupyterHub.cleanup_proxy = True
    # No 429 "try again" for a class logging in at once: the spawner's line of starts
    # (ScaleLabSpawner.concurrent_starts) bounds the starts, and GPU-queued ones do not count.
    c.JupyterHub.concurrent_spawn_limit = 0
    c.ConfigurableHTTPProxy.command = list(s.proxy_command)
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s.proxy_api_port}"
    c.ConfigurableHTTPProxy.pid_file = str(state.proxy_pid)

    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = password
    c.Authenticator.allow_all = True  # anyone who knows the course password may log in
    c.Authenticator.username_pattern = USERNAME_PATTERN  # every name can be a home folder

    c.ScaleLabSpawner.home_root = str(state.homes)
    c.ScaleLabSpawner.system_users = s.system_users
    # Without system users every server runs as the hub's user, root when run by root: only
    # with --shared-identity (choose_identity refuses it otherwise), so said on purpose.
    c.ScaleLabSpawner.allow_root_servers = not s.system_users
    c.ScaleLabSpawner.store_url = s.store_url
    c.ScaleLabSpawner.spark_master = DEFAULT_SPARK_MASTER
    c.ScaleLabSpawner.kernelspec_path = [str(state.kernelspecs)]
    c.ScaleLabSpawner.gpu_queue_file = str(state.gpu_queue)
    c.ScaleLabSpawner.server_log_dir = str(state.server_logs)
    c.Spawner.http_timeout = 90
    c.Spawner.start_timeout = 180
    if s.hadoop:
        spawner_config(c, HadoopService.from_dict(s.hadoop))
    return c


def config_file_text(s: UpSettings, operator_config: str | None) -> str:
    """Text of the ``jupyterhub_config.py`` that ``scalelab up`` writes to the state folder.

    The password is not in it: the hub reads it from ``SCALELAB_PASSWORD`` in its environment.
    """
    lines = [
        "# Written by `scalelab up` at every start; do not edit.",
        "# Put your own settings in a file and pass it with `scalelab up --config FILE`.",
        "import os",
        "from scalelab.commands.up_config import UpSettings, embedded_config",
        f"settings = UpSettings.from_json({s.to_json()!r})",
        "c.merge(embedded_config(settings, os.environ['SCALELAB_PASSWORD']))",
    ]
    if operator_config:
        lines.append(f"load_subconfig({str(Path(operator_config).resolve())!r})")
    if s.hadoop:  # after the operator's file, which may set the list of services
        lines += [
            "from scalelab.commands.up_hadoop import HadoopService, add_service",
            "add_service(c, HadoopService.from_dict(settings.hadoop))",
        ]
    lines += [
        "import scalelab",
        "scalelab.configure(c)  # spawner, pages, services, checks, GPU queue: docs/",
    ]
    return "\n".join(lines) + "\n"
