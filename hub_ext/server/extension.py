"""ScaleLab's jupyter_server extension, loaded by every user's single-user server.

Enabled by ``etc/jupyter/jupyter_server_config.d/scalelab.json``. At start it delivers the labs
(:func:`deliver_labs`, which never fails the load); a full home costs saving, never reading
(:func:`notary_config`, :class:`SignatureDatabase`, :func:`refuse_a_save_without_room`).
Why: docs/design-notes.md, scalelab.hub_ext.server.extension.
"""

from __future__ import annotations

import base64
import functools
import os
import sqlite3
from pathlib import Path
from typing import Any

import nbformat
from nbformat.sign import SQLiteSignatureStore
from tornado.web import HTTPError
from traitlets.config import Config

from scalelab.common.access_log import quiet_service_requests
from scalelab.common.atomicfile import write_atomic
from scalelab.common.diskspace import full_disk_message, is_disk_full
from scalelab.hub_ext.labs.sync import sync_labs
from scalelab.hub_ext.server import store_drive
from scalelab.hub_ext.server.handin_page import add_handin_page
from scalelab.hub_ext.server.labs_handlers import add_lab_handlers


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "scalelab.hub_ext.server.extension"}]


def _link_jupyter_server_extension(serverapp: Any) -> None:
    store_drive.link(serverapp)  # before the contents manager is built: the store drive
    serverapp.update_config(Config(notary_config(serverapp)))  # reading works on a full home


def _load_jupyter_server_extension(serverapp: Any) -> None:
    quiet_service_requests()  # the GPU monitor's poll of the kernels at debug level
    store_drive.load(serverapp)
    for manager in home_managers(serverapp.contents_manager):
        manager.register_pre_save_hook(refuse_a_save_without_room)
    add_lab_handlers(serverapp)  # "Get new labs" page and API
    add_handin_page(serverapp)  # "Hand In" page
    from scalelab.hub_ext.server import logstream
    from scalelab.kernels import livy

    logstream.setup(serverapp)
    livy.setup(serverapp)
    from scalelab.hub_ext.server import notices

    notices.setup(serverapp)  # POST /scalelab/api/notice: warnings from the hub to the student
    from scalelab.hub_ext.server import oom_watch

    oom_watch.setup(serverapp)  # a process killed for memory: told before the next cell
    from scalelab.hub_ext.server import gpu_report

    gpu_report.setup(serverapp)  # this server's GPU readings to the hub (SCALELAB_GPU_REPORT_S)
    from scalelab.hub_ext.server import spark_ui

    spark_ui.setup(serverapp)  # <base_url>sparkui/<port>/: the Spark UI, whole, behind the hub
    from scalelab.hub_ext.server import spark_ui_page

    spark_ui_page.setup(serverapp)  # scalelab/sparkui: Course > Spark UI..., the kernel's UI
    from scalelab.hub_ext.server import warm_kernel

    warm_kernel.setup(serverapp)  # a PySpark kernel started ahead for the next notebook
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


class SignatureDatabase(SQLiteSignatureStore):
    """nbformat's SQLite store of trusted notebooks' signatures, readable on a full disk.

    nbformat's store records when a trusted notebook was last seen on every read (an
    ``UPDATE`` and a commit), and when the disk or quota is full SQLite fails that with
    "database or disk is full", which made opening a notebook answer 500. Here that write is
    skipped with a warning: the notebook is still found trusted. Storing a new signature (on
    save) on a full disk is skipped the same way: the notebook opens untrusted later (its
    outputs are shown, its JavaScript not run until trusted again).
    """

    def check_signature(self, digest: str, algorithm: str) -> bool:
        """Whether ``digest`` (hex, of ``algorithm``) is a trusted notebook's signature."""
        try:
            return bool(super().check_signature(digest, algorithm))
        except sqlite3.OperationalError as exc:
            if not is_disk_full(exc):
                raise
            self.db.rollback()
            self.log.warning(
                "Not recording the notebook as seen: %s", full_disk_message(self.db_file)
            )
            row = self.db.execute(
                "SELECT id FROM nbsignatures WHERE algorithm = ? AND signature = ?",
                (algorithm, digest),
            ).fetchone()
            return row is not None

    def store_signature(self, digest: str, algorithm: str) -> None:
        """Record ``digest`` as trusted; skipped, with a warning, on a full disk or quota."""
        try:
            super().store_signature(digest, algorithm)
        except sqlite3.OperationalError as exc:
            if not is_disk_full(exc):
                raise
            self.db.rollback()
            self.log.warning("The notebook is saved untrusted: %s", full_disk_message(self.db_file))


def notary_config(serverapp: Any) -> dict[str, Any]:
    """``NotebookNotary`` settings under which reading a notebook writes nothing it needs.

    - ``secret``: the signing key from ``<data dir>/notebook_secret``, made (1024 random bytes,
      base64, mode 0600, written whole) if missing or empty (as a full disk left it before);
      if it cannot be written, a key for this server's life, with a warning naming the disk;
    - ``store_factory``: :class:`SignatureDatabase` on nbformat's own database file.

    Settings the operator gave (``NotebookNotary.secret``, ``.secret_file``, ``.data_dir``,
    ``.db_file``) are kept: their files are used, and a ``store_factory`` of theirs is left
    alone. Returns ``{"NotebookNotary": {...}}`` for ``ServerApp.update_config``; never raises.
    """
    given = dict(serverapp.config.get("NotebookNotary", {}))
    data_dir = Path(given.get("data_dir") or serverapp.data_dir)
    settings: dict[str, Any] = {}
    if "secret" not in given:
        key_file = Path(given.get("secret_file") or data_dir / "notebook_secret")
        settings["secret"] = _signing_key(key_file, serverapp.log)
    if "store_factory" not in given:
        db_file = str(given.get("db_file") or data_dir / "nbsignatures.db")
        settings["store_factory"] = functools.partial(SignatureDatabase, db_file)
    return {"NotebookNotary": settings}


def _signing_key(key_file: Path, log: Any) -> bytes:
    try:
        key = key_file.read_bytes()
    except FileNotFoundError:
        key = b""
    except OSError as exc:
        log.warning(
            "Cannot read the notebook-signing key %s (%s): a new one for now", key_file, exc
        )
        return base64.encodebytes(os.urandom(1024))
    if key.strip():
        return key
    key = base64.encodebytes(os.urandom(1024))
    try:
        key_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(key_file, key)
        key_file.chmod(0o600)
    except OSError as exc:
        why = full_disk_message(key_file) if is_disk_full(exc) else str(exc)
        log.warning(
            "The notebook-signing key is kept for this server's life only, not in %s: %s",
            key_file,
            why,
        )
    return key


def home_managers(contents_manager: Any) -> list[Any]:
    """The file contents managers serving the home: ``contents_manager`` itself, or the root
    manager of jupyter-fs' MetaManager (the store drive's, which writes to the store, not)."""
    root = getattr(contents_manager, "root_manager", None)
    managers = [contents_manager, root] if root is not None else [contents_manager]
    return [m for m in managers if hasattr(m, "_get_os_path") and hasattr(m, "use_atomic_writing")]


def refuse_a_save_without_room(
    model: dict[str, Any], path: str, contents_manager: Any, **_: Any
) -> None:
    """A pre-save hook: refuse, with HTTP 507, a save that the disk cannot hold.

    Counts what jupyter_server's save will write, in the disk's blocks: the new content
    (a notebook as nbformat writes it, a text file as UTF-8, a base64 file decoded), the copy
    of the old file that its atomic writing keeps until the write succeeded, and a notebook's
    first checkpoint. When that exceeds the free space (``os.statvfs``), nothing is written and
    the answer is 507 with :func:`~scalelab.common.diskspace.full_disk_message` ("The disk
    holding ... is full: this needs N MiB more ..."). A full quota (EDQUOT) cannot be seen in
    advance: that save still fails when written, as jupyter_server reports it.

    Raises
    ------
    tornado.web.HTTPError
        507, when the save cannot fit.
    """
    kind, content = model.get("type"), model.get("content")
    if kind not in ("notebook", "file") or content is None:
        return
    os_path = contents_manager._get_os_path(path)
    try:
        disk = os.statvfs(os.path.dirname(os_path))
    except OSError:  # no such folder: the save itself says so
        return
    block = disk.f_frsize or 4096

    def blocks(size: int) -> int:
        return -(-size // block) * block

    new = blocks(_written_size(kind, content, model.get("format")))
    old = blocks(os.path.getsize(os_path)) if os.path.isfile(os_path) else 0
    needed = new + old if contents_manager.use_atomic_writing else new
    free = disk.f_bavail * disk.f_frsize + (0 if contents_manager.use_atomic_writing else old)
    checkpoint_path = getattr(contents_manager.checkpoints, "checkpoint_path", None)
    if (
        kind == "notebook"
        and checkpoint_path
        and not os.path.exists(checkpoint_path("checkpoint", path))
    ):
        needed += new
    if needed > free:
        message = full_disk_message(os_path, needed)
        contents_manager.log.warning("Refused to save %s: %s", path, message)
        raise HTTPError(507, f"{path} was not saved, and is as it was. {message}")


def _written_size(kind: str, content: Any, file_format: str | None) -> int:
    """Bytes that jupyter_server writes for a save of ``kind`` (notebook or file)."""
    if kind == "notebook":
        text = nbformat.writes(nbformat.from_dict(content), version=nbformat.NO_CONVERT)
        return len(text.encode()) + (0 if text.endswith("\n") else 1)
    if file_format == "base64":
        return len(content) * 3 // 4
    return len(str(content).encode())
