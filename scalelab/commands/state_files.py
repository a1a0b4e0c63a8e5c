"""The state folder of ``scalelab up`` and the names of the files in it, in one place (pure).

``scalelab up`` writes them, ``scalelab doctor`` reads them, and the hub it starts is configured
with them (:func:`scalelab.commands.up_config.embedded_config`). Nothing here touches the disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from scalelab import envvars

#: The state folder of ``scalelab up`` run by root (as TLJH's ``/opt/tljh/state``): outside
#: root's home (mode 0700), so that the students' system users can reach their homes in it.
ROOT_STATE_DIR = Path("/var/lib/scalelab")


def default_state_dir() -> Path:
    """``$SCALELAB_STATE_DIR``; else, for root, :data:`ROOT_STATE_DIR`; else
    ``$XDG_DATA_HOME/scalelab`` (``~/.local/share/scalelab``)."""
    if os.environ.get(envvars.STATE_DIR):
        return Path(os.environ[envvars.STATE_DIR]).expanduser()
    if os.geteuid() == 0:
        return ROOT_STATE_DIR
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "scalelab"


def default_store_url(state_dir: str | Path) -> str:
    """The embedded course store: the folder ``<state dir>/store`` as a ``file://`` URL."""
    return StateFolder(Path(state_dir).resolve()).store.as_uri()


@dataclass(frozen=True)
class StateFolder:
    """Paths inside one state folder ``root`` (absolute or not, as given)."""

    root: Path

    #: Folders ``scalelab up`` creates before anything starts.
    SUBFOLDERS = ("homes", "logs")

    @property
    def database(self) -> Path:
        """JupyterHub's SQLite database (``c.JupyterHub.db_url``)."""
        return self.root / "jupyterhub.sqlite"

    @property
    def cookie_secret(self) -> Path:
        """``c.JupyterHub.cookie_secret_file``."""
        return self.root / "jupyterhub_cookie_secret"

    @property
    def hub_pid(self) -> Path:
        """Written by JupyterHub (``c.JupyterHub.pid_file``) at start, removed on a clean stop."""
        return self.root / "jupyterhub.pid"

    @property
    def proxy_pid(self) -> Path:
        """Written by JupyterHub for its proxy (``c.ConfigurableHTTPProxy.pid_file``)."""
        return self.root / "jupyterhub-proxy.pid"

    @property
    def config_file(self) -> Path:
        """The configuration ``scalelab up`` writes and starts the hub with (``jupyterhub -f``)."""
        return self.root / "jupyterhub_config.py"

    @property
    def lock(self) -> Path:
        """``flock``-ed by the running ``scalelab up``; holds its pid and URL as JSON."""
        return self.root / "scalelab-up.lock"

    @property
    def run_record(self) -> Path:
        """Written by a running ``scalelab up`` (its pid and the processes it started), removed
        when it stops; still there at the next start: the earlier run did not stop cleanly."""
        return self.root / "scalelab-up.run.json"

    @property
    def hub_ports(self) -> Path:
        """The hub's and the proxy API's ports of the last run, used again when free, so that
        servers left running (``c.JupyterHub.cleanup_servers = False``) still reach the hub."""
        return self.root / "hub-ports.json"

    @property
    def homes(self) -> Path:
        """Users' homes, ``<homes>/<user>`` (``c.ScaleLabSpawner.home_root``)."""
        return self.root / "homes"

    @property
    def logs(self) -> Path:
        """Logs: the hub's and, under ``servers/``, each server's."""
        return self.root / "logs"

    @property
    def hub_log(self) -> Path:
        """The hub's output."""
        return self.logs / "jupyterhub.log"

    @property
    def server_logs(self) -> Path:
        """``c.ScaleLabSpawner.server_log_dir``."""
        return self.logs / "servers"

    @property
    def gpu_queue(self) -> Path:
        """The GPU queue kept across restarts (``c.ScaleLabSpawner.gpu_queue_file``)."""
        return self.root / "gpu-queue.json"

    @property
    def kernelspecs(self) -> Path:
        """The Jupyter data folder of the kernelspecs (``<dir>/kernels/<name>/``)."""
        return self.root / "share" / "jupyter"

    @property
    def store(self) -> Path:
        """The embedded course store."""
        return self.root / "store"
