"""ScaleLab's jupyter_server extension, loaded by every user's single-user server.

Enabled by the file ``etc/jupyter/jupyter_server_config.d/scalelab.json`` that the package
installs. At server start it copies the course labs into the server's root folder (the
student's home): :func:`deliver_labs`, which never makes the extension fail loading.
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
    deliver_labs(serverapp.root_dir, serverapp.log)


def deliver_labs(root_dir: str, log: Any) -> None:
    """Copy the course labs into ``root_dir`` and log what happened, one line each, to ``log``
    (a :class:`logging.Logger`): repairs (a malformed or lost manifest, a folder named like a
    lab) as warnings, refused labs and a sync that stopped (full disk, ``EACCES``) as errors,
    copies as info. Never raises: the server starts without the labs rather than not at all (a
    bug in the sync is logged with its traceback)."""
    try:
        report = sync_labs(root_dir)
    except OSError as exc:
        log.error("ScaleLab could not copy the course labs into %s: %s", root_dir, exc)
        return
    except Exception:  # never "extension failed loading" because of the labs
        log.exception("ScaleLab's labs sync failed in %s; the server runs without it", root_dir)
        return
    for line in report.warnings:
        log.warning("ScaleLab labs sync in %s: %s", root_dir, line)
    for problem in report.problems:
        log.error("ScaleLab did not deliver a course lab: %s", problem)
    copied = report.copied + report.updated + report.beside
    if copied:
        log.info("ScaleLab copied the course labs into %s: %s", root_dir, ", ".join(copied))
