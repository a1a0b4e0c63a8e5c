"""The course store as the folder ``store`` of the home (jupyter-fs' drive underneath): the
drive's settings and the parts that need no running server. The rest runs on a real single-user
server behind a real hub in ``tests/integration/hub/test_store_drive.py``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from scalelab.hub_ext.server.store_drive import DRIVE_URL, StoreDrive, drive_config, drive_id, link

with warnings.catch_warnings():
    # jupyter-fs 1.2.1's config module passes traitlets metadata the pre-4.1 way (upstream):
    # a DeprecationWarning at its first import, which pytest's "error" filter would raise.
    warnings.simplefilter("ignore", DeprecationWarning)
    import jupyterfs.metamanager  # noqa: F401


def test_drive_settings_allow_no_user_defined_drives():
    config = drive_config("Course store")["JupyterFs"]
    assert config["allow_user_resources"] is False
    assert [r["url"] for r in config["resources"]] == ["scalelab:///"]
    assert drive_id() == drive_id(DRIVE_URL) and len(drive_id()) == 8


def test_ops_can_turn_the_drive_off():
    c = Config()
    c.StoreDrive.enabled = False
    assert StoreDrive(config=c).enabled is False
    assert StoreDrive().enabled is True


def test_a_bad_folder_name_is_one_line_naming_the_setting():
    from traitlets import TraitError

    c = Config()
    c.StoreDrive.folder_name = "a/b"
    with pytest.raises(TraitError) as raised:
        StoreDrive(config=c)
    message = str(raised.value)
    assert message.startswith("c.StoreDrive.folder_name: 'a/b' cannot name") and "\n" not in message


def _server(config: Config | None = None) -> Any:
    from jupyter_server.serverapp import ServerApp

    return ServerApp(config=config or Config())


STORE_ENV = {"SCALELAB_STORE_URL": "file:///srv/course"}


def test_link_puts_the_drive_under_jupyter_fs(tmp_path: Path):
    from jupyterfs.metamanager import MetaManager

    from scalelab.hub_ext.server.store_contents import StoreMetaManager

    app = _server()
    link(app, STORE_ENV)
    assert app.contents_manager_class is StoreMetaManager
    assert issubclass(StoreMetaManager, MetaManager)
    assert app.config.JupyterFs.resources[0]["url"] == DRIVE_URL
    assert app.config.JupyterFs.allow_user_resources is False

    c = Config()
    c.StoreDrive.folder_name = "course store"
    c.ContentsManager.root_dir = str(tmp_path)
    assert StoreMetaManager(config=c).folder_name == "course store"
    c = Config()
    c.ContentsManager.root_dir = str(tmp_path)
    assert StoreMetaManager(config=c).folder_name == "store"


def test_link_keeps_ops_synchronous_contents_manager_for_the_home():
    from jupyter_server.services.contents.largefilemanager import LargeFileManager
    from jupyterfs.metamanager import MetaManager

    class OpsManager(LargeFileManager):
        pass

    c = Config()
    c.ServerApp.contents_manager_class = OpsManager
    app = _server(c)
    link(app, STORE_ENV)
    assert issubclass(app.contents_manager_class, MetaManager)
    assert app.config.JupyterFs.root_manager_class is OpsManager


@pytest.mark.parametrize("case", ["async ops manager", "drive off", "no store"])
def test_link_leaves_the_server_as_it_was(case: str):
    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

    class OpsManager(AsyncLargeFileManager):
        pass

    c = Config()
    env = dict(STORE_ENV)
    if case == "async ops manager":
        c.ServerApp.contents_manager_class = OpsManager
    elif case == "drive off":
        c.StoreDrive.enabled = False
    else:
        env = {}
    app = _server(c)
    before = app.contents_manager_class
    link(app, env)
    assert app.contents_manager_class is before
    assert "JupyterFs" not in app.config


def test_a_refusal_is_found_behind_jupyter_fs_wrapping():
    from tornado.web import HTTPError

    from scalelab.hub_ext.server.store_contents import forbidden, store_refusal
    from scalelab.store.errors import StoreAccessError

    refusal = StoreAccessError("writing 'datasets/x' is not allowed: datasets/ is read-only")
    try:
        try:
            raise refusal
        except StoreAccessError as exc:  # jupyter-fs catches Exception in save
            raise HTTPError(500, f"Unexpected error while saving file: {exc}") from None
    except HTTPError as wrapped:
        assert store_refusal(wrapped) is refusal
    assert store_refusal(HTTPError(500, "disk full")) is None
    assert store_refusal(PermissionError("[Errno 13] not ours")) is None
    answer = forbidden(refusal)
    assert (answer.status_code, answer.log_message) == (403, str(refusal))


def test_a_full_disk_is_found_behind_wrapping_and_names_the_file_written(tmp_path: Path):
    import errno

    from tornado.web import HTTPError

    from scalelab.common.diskspace import disk_full_error
    from scalelab.hub_ext.server.store_contents import disk_full_answer

    quota = OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "a.ipynb"))
    try:
        try:
            raise quota
        except OSError as exc:  # jupyter_server's save wraps it
            raise HTTPError(500, f"Unexpected error while saving file: a.ipynb {exc}") from exc
    except HTTPError as wrapped:
        assert disk_full_error(wrapped) is quota
        answer = disk_full_answer("save", "a.ipynb", quota, "/nowhere")
    assert answer.status_code == 507
    assert answer.log_message.startswith("a.ipynb was not saved: The disk holding " + str(tmp_path))
    renamed = disk_full_answer("rename", "b.txt", OSError(errno.ENOSPC, "full"), str(tmp_path))
    assert renamed.log_message.startswith(f"rename of b.txt failed: The disk holding {tmp_path}")
    assert disk_full_error(HTTPError(500, "No space left on device")) is None
