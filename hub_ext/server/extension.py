"""ScaleLab's jupyter_server extension, loaded by every user's single-user server.

Enabled by the file ``etc/jupyter/jupyter_server_config.d/scalelab.json`` that the package
installs. At server start it copies the course labs into the server's root folder (the
student's home).
"""

from __future__ import annotations

from typing import Any

from scalelab.hub_ext.labs.sync import sync_labs
from scalelab.hub_ext.server import store_drive
from scalelab.hub_ext.server.labs_handlers import add_lab_handlers


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "scalelab.hub_ext.server.extension"}]


def _link_jupyter_server_extension(serverapp: Any) -> None:
    store_drive.link(serverapp)  # before the contents manager is built: the store drive


def _load_jupyter_server_extension(serverapp: Any) -> None:
    store_drive.load(serverapp)
    add_lab_handlers(serverapp)  # "Get new labs" page and API
    from scalelab.hub_ext.server import logstream
    from scalelab.kernels import livy

    logstream.setup(serverapp)
    livy.setup(serverapp)
    from scalelab.hub_ext.server import notices

    notices.setup(serverapp)  # POST /scalelab/api/notice: warnings from the hub to the student
    try:
        report = sync_labs(serverapp.root_dir)
    except OSError as exc:
        serverapp.log.error(
            "ScaleLab could not copy the course labs into %s: %s", serverapp.root_dir, exc
        )
        return
    for problem in report.problems:
        serverapp.log.error("ScaleLab did not deliver a course lab: %s", problem)
    copied = report.copied + report.updated + report.beside
    if copied:
        serverapp.log.info(
            "ScaleLab copied the course labs into %s: %s", serverapp.root_dir, ", ".join(copied)
        )
