"""The course store as the folder ``store`` of the home in JupyterLab's file browser (jupyter-fs).

:func:`link` (before the server builds its contents manager) and :func:`load` (once it runs)
make it :class:`~scalelab.hub_ext.server.store_contents.StoreMetaManager` over the student's
view of the store; ``c.StoreDrive.enabled = False`` turns the drive off.
Why: docs/design-notes.md, scalelab.hub_ext.server.store_drive.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from traitlets import Bool, TraitError, Unicode, validate
from traitlets.config import Config, Configurable

from scalelab import envvars
from scalelab.hub_ext.server.store_folder import DEFAULT_FOLDER, check_folder_name
from scalelab.store.access.student import PROTOCOL, register_protocol

#: The drive's fsspec URL: the student's view of the store, read from the environment.
DRIVE_URL = f"{PROTOCOL}:///"


class StoreDrive(Configurable):
    """The course store in the file browser (``c.StoreDrive.*`` in the server's config)."""

    enabled = Bool(
        True,
        config=True,
        help="Show the course store as a folder of the home in the file browser (folder_name). "
        "Needs SCALELAB_STORE_URL (set by the spawner) and jupyter-fs; without either, no store "
        "folder.",
    )
    folder_name = Unicode(
        DEFAULT_FOLDER,
        config=True,
        help="The course store's folder at the home's root in the file browser: with 'store', "
        "store/home/you/x.csv there is store.open('home/you/x.csv') in a notebook. A real file "
        "or folder of that name in a student's home wins (the server logs a warning).",
    )
    name = Unicode(
        "Course store",
        config=True,
        help="The store's name among jupyter-fs' resources (GET /jupyterfs/resources).",
    )

    @validate("folder_name")
    def _valid_folder_name(self, proposal: Any) -> str:
        try:
            return check_folder_name(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"c.StoreDrive.folder_name: {exc}") from None


def drive_id(url: str = DRIVE_URL) -> str:
    """The drive's prefix in contents API paths (``<id>:home/<user>``), as jupyter-fs makes it:
    the first 8 hex digits of MD5 of URL + ``"fsspec"``."""
    return hashlib.md5((url + "fsspec").encode(), usedforsecurity=False).hexdigest()[:8]


def drive_config(name: str) -> dict[str, Any]:
    """jupyter-fs settings of the single-user server (pure).

    Returns
    -------
    dict
        ``{"JupyterFs": {...}}`` for ``ServerApp.update_config``: one server-side resource, no
        user-defined ones, and load errors shown to the student.
    """
    return {
        "JupyterFs": {
            "resources": [
                {
                    "name": name,
                    "url": DRIVE_URL,
                    "type": "fsspec",
                    "auth": "none",
                    "defaultWritable": True,
                }
            ],
            "allow_user_resources": False,
            "surface_init_errors": True,
        }
    }


def wanted(serverapp: Any, environ: Mapping[str, str]) -> bool:
    """Whether this server gets the drive: enabled, a store configured, jupyter-fs installed."""
    if not StoreDrive(parent=serverapp).enabled or not environ.get(envvars.STORE_URL):
        return False
    try:
        import jupyterfs  # noqa: F401
    except ImportError:
        serverapp.log.warning("ScaleLab: jupyter-fs is not installed; no course store drive.")
        return False
    return True


def link(serverapp: Any, environ: Mapping[str, str] | None = None) -> None:
    """Before the contents manager exists: make it jupyter-fs' MetaManager with the store drive."""
    env = os.environ if environ is None else environ
    if not wanted(serverapp, env):
        return
    from jupyter_server.services.contents.manager import AsyncContentsManager

    from scalelab.hub_ext.server.store_contents import StoreMetaManager

    config = Config(drive_config(StoreDrive(parent=serverapp).name))  # folder_name checked
    if "contents_manager_class" in serverapp.config.get("ServerApp", {}):
        # Ops chose a contents manager: it stays the home's, under jupyter-fs. jupyter-fs calls
        # its root manager synchronously, so an asynchronous one cannot go under it.
        chosen = serverapp.contents_manager_class
        if issubclass(chosen, AsyncContentsManager):
            serverapp.log.warning(
                "ScaleLab: no course store drive: ServerApp.contents_manager_class = %s is "
                "asynchronous, and jupyter-fs can only serve the home through a synchronous one "
                "(e.g. LargeFileManager); the home is served as configured.",
                chosen.__name__,
            )
            return
        config.JupyterFs.root_manager_class = chosen
    register_protocol()
    serverapp.update_config(config)
    serverapp.contents_manager_class = StoreMetaManager


def load(serverapp: Any) -> None:
    """Once the server runs: jupyter-fs' REST handlers (``/jupyterfs/resources``)."""
    try:
        from jupyterfs.metamanager import MetaManagerShared
    except ImportError:
        return
    if not isinstance(getattr(serverapp, "contents_manager", None), MetaManagerShared):
        return
    from jupyterfs.extension import _load_jupyter_server_extension

    _load_jupyter_server_extension(serverapp)
    serverapp.log.info(
        "ScaleLab: the course store is the folder %r of the home in the file browser "
        "(jupyter-fs' drive %s:)",
        StoreDrive(parent=serverapp).folder_name,
        drive_id(),
    )
