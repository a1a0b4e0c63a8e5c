"""The course store drive (jupyter-fs) on a real single-user server started by a real hub.

Path-escape attempts go through the drive's REST contents endpoint (``/api/contents/<drive>:...``)
the way JupyterLab's file browser sends them; the drive's pure settings are unit-tested too.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from playwright.sync_api import expect, sync_playwright
from traitlets.config import Config

from scalelab.hub_ext.server.store_drive import DRIVE_URL, StoreDrive, drive_config, drive_id, link
from tests.conftest import REPO
from tests.hubproc import ScaleLabUp, running
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

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


def _resources(hub: ScaleLabUp, user: str, method: str = "GET", **kwargs) -> requests.Response:
    """jupyter-fs' ``/user/<name>/jupyterfs/resources`` on the user's server."""
    url = f"{hub.url}/user/{user}/jupyterfs/resources"
    return requests.request(method, url, headers=hub.auth, timeout=60, **kwargs)


def _contents(hub: ScaleLabUp, user: str, path: str, method: str = "GET", **kwargs):
    return hub.server_api(user, method, f"/contents/{drive_id()}:{path}", **kwargs)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    """``scalelab up`` whose store holds another student's file, a data set and ops' files, and
    alice's running server; alice's store home has links out of it."""
    state = tmp_path_factory.mktemp("drive") / "state"
    store = state / "store"
    for folder in ("home/alice", "home/bob", "datasets/songs", "ops"):
        (store / folder).mkdir(parents=True)
    (store / "home/bob/secret.txt").write_text("bob's secret")
    (store / "datasets/songs/part-0.csv").write_text("year,f1\n2001,0.5\n")
    (store / "ops/credentials").write_text("ops secret")
    (store / "home/alice/to-bob").symlink_to(store / "home/bob")
    (store / "home/alice/to-etc").symlink_to("/etc")
    (store / "home/alice/to-data").symlink_to(store / "datasets/songs")
    up = ScaleLabUp(state)
    with running(up):
        up.start_server("alice")
        yield up


@pytest.mark.integration
def test_the_store_is_a_drive_beside_the_home(hub: ScaleLabUp):
    resources = _resources(hub, "alice")
    assert resources.status_code == 200, resources.text
    [drive] = resources.json()
    assert (drive["name"], drive["drive"], drive["init"]) == ("Course store", drive_id(), True)
    home = hub.server_api("alice", "GET", "/contents/")
    assert "lab1_millionsong_regression.ipynb" in {e["name"] for e in home.json()["content"]}
    root = _contents(hub, "alice", "")
    assert sorted(e["name"] for e in root.json()["content"]) == ["datasets", "home"]
    assert [e["name"] for e in _contents(hub, "alice", "home").json()["content"]] == ["alice"]
    listing = _contents(hub, "alice", "home/alice").json()["content"]
    assert [e["name"] for e in listing] == ["to-data"]  # links leaving the roots are left out
    data = _contents(hub, "alice", "datasets/songs/part-0.csv").json()
    assert data["content"].startswith("year,f1")


@pytest.mark.integration
def test_writes_go_to_the_home_only(hub: ScaleLabUp):
    store = hub.state_dir / "store"
    body = {"type": "file", "format": "text", "content": "rmse 10.3\n"}
    saved = _contents(hub, "alice", "home/alice/result.txt", "PUT", json=body)
    assert saved.status_code in (200, 201), saved.text
    assert (store / "home/alice/result.txt").read_text() == "rmse 10.3\n"
    refused = _contents(hub, "alice", "datasets/songs/part-0.csv", "PUT", json=body)
    assert refused.status_code == 403, refused.text
    assert "datasets/ is read-only" in refused.json()["message"]
    assert (store / "datasets/songs/part-0.csv").read_text().startswith("year")
    refused = _contents(hub, "alice", "home/bob/planted.txt", "PUT", json=body)
    assert refused.status_code == 403, refused.text
    assert "you may read and write home/alice" in refused.json()["message"]
    assert not (store / "home/bob/planted.txt").exists()
    assert (store / "home/alice/result.txt").read_text() == "rmse 10.3\n"


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file and folder under ``root`` (links not followed): mtime and bytes."""
    return {
        str(p.relative_to(root)): (
            p.lstat().st_mtime_ns,
            p.read_bytes() if p.is_file() and not p.is_symlink() else b"",
        )
        for p in sorted(root.rglob("*"))
    }


MINE = "home/alice/mine.txt"
TEXT = {"type": "file", "format": "text", "content": "planted\n"}
READ_ONLY = "datasets/ is read-only"
HOME_ONLY = "you may read and write home/alice/... and read datasets/..."


def _to(target: str) -> dict[str, str]:
    return {"path": f"{drive_id()}:{target}"}


@pytest.mark.integration
@pytest.mark.parametrize(
    ("method", "path", "body", "names", "rule"),
    [
        # writes: save, new file, new folder, upload into a folder, copy into it
        ("PUT", "datasets/songs/part-0.csv", TEXT, "datasets/songs/part-0.csv", READ_ONLY),
        ("PUT", "datasets/songs/new.csv", TEXT, "datasets/songs/new.csv", READ_ONLY),
        ("PUT", "datasets/new", {"type": "directory"}, "datasets/new", READ_ONLY),
        ("PUT", "home/bob/planted.txt", TEXT, "home/bob/planted.txt", HOME_ONLY),
        ("PUT", "ops/planted.txt", TEXT, "ops/planted.txt", HOME_ONLY),
        ("PUT", "home/alice/to-bob/planted.txt", TEXT, "home/alice/to-bob/planted.txt", "link"),
        ("POST", "datasets/songs", {"type": "file"}, "datasets/songs/untitled", READ_ONLY),
        (
            "POST",
            "datasets/songs",
            {"copy_from": f"{drive_id()}:{MINE}"},
            "datasets/songs/mine",
            READ_ONLY,
        ),
        # reads
        ("GET", "home/bob/secret.txt", None, "home/bob/secret.txt", HOME_ONLY),
        ("GET", "home/bob", None, "home/bob", HOME_ONLY),
        ("GET", "ops/credentials", None, "ops/credentials", HOME_ONLY),
        ("GET", "home/alice/to-bob/secret.txt", None, "home/alice/to-bob/secret.txt", "link"),
        # renames: out of the home, into datasets or another home, out of datasets or a home
        ("PATCH", MINE, _to("datasets/songs/moved.txt"), "datasets/songs/moved.txt", READ_ONLY),
        ("PATCH", MINE, _to("home/bob/moved.txt"), "home/bob/moved.txt", HOME_ONLY),
        ("PATCH", MINE, _to("ops/moved.txt"), "ops/moved.txt", HOME_ONLY),
        (
            "PATCH",
            "datasets/songs/part-0.csv",
            _to("home/alice/part-0.csv"),
            "datasets/songs/part-0.csv",
            READ_ONLY,
        ),
        ("PATCH", "home/bob/secret.txt", _to("home/alice/stolen.txt"), "home/bob", HOME_ONLY),
        # deletes
        ("DELETE", "datasets/songs/part-0.csv", None, "datasets/songs/part-0.csv", READ_ONLY),
        ("DELETE", "datasets/songs", None, "datasets/songs", READ_ONLY),
        ("DELETE", "home/bob/secret.txt", None, "home/bob/secret.txt", HOME_ONLY),
        ("DELETE", "home/alice/to-bob/secret.txt", None, "home/alice/to-bob", "link"),
    ],
)
def test_each_refusal_is_a_403_naming_the_path_and_the_rule_and_changes_nothing(
    hub: ScaleLabUp, method: str, path: str, body: dict | None, names: str, rule: str
):
    store = hub.state_dir / "store"
    (store / MINE).write_text("alice's own\n")
    before = _snapshot(store)
    response = _contents(hub, "alice", path, method, json=body)
    assert response.status_code == 403, (method, path, response.status_code, response.text)
    message = response.json()["message"]
    assert names in message and rule in message, message
    assert "Traceback" not in response.text and "Unexpected error" not in message
    if method == "DELETE" and rule != "link":  # the refusal names the action (issue 13)
        assert message.startswith("deleting "), message
    assert _snapshot(store) == before


@pytest.mark.integration
@pytest.mark.parametrize(
    "path",
    [
        "home/bob/secret.txt",
        "home/bob",
        "ops/credentials",
        quote("../../ops/credentials", safe=""),
        quote("home/alice/../../home/bob/secret.txt", safe=""),
        "home/alice/../bob/secret.txt",
        quote("/etc/passwd", safe=""),
        "home/alice/to-bob/secret.txt",
        "home/alice/to-etc/passwd",
    ],
)
def test_escapes_through_the_drive_are_refused(hub: ScaleLabUp, path: str):
    response = _contents(hub, "alice", path)
    assert response.status_code in (403, 404), (path, response.status_code, response.text)
    assert "bob's secret" not in response.text and "ops secret" not in response.text
    assert "root:" not in response.text
    assert "Traceback" not in response.text


@pytest.mark.integration
def test_a_student_cannot_mount_a_drive_of_their_own(hub: ScaleLabUp):
    mine = {"name": "everything", "url": "file:///", "type": "fsspec", "auth": "none"}
    response = _resources(
        hub, "alice", "POST", data=json.dumps({"resources": [mine], "options": {}})
    )
    assert response.status_code == 200, response.text
    assert [r["url"] for r in response.json()] == [DRIVE_URL]
    theirs = hashlib.md5(b"file:///fsspec", usedforsecurity=False).hexdigest()[:8]
    escaped = hub.server_api("alice", "GET", f"/contents/{theirs}:etc/passwd")
    assert escaped.status_code == 404 and "root:" not in escaped.text
    # The store drive still works after the attempt.
    assert _contents(hub, "alice", "home/alice/result.txt").status_code in (200, 404)
    assert Path(hub.state_dir / "store/ops/credentials").read_text() == "ops secret"


DRIVE_SCREENSHOT = REPO / "docs" / "screenshot-store-drive.png"


@pytest.mark.browser
def test_the_drive_shows_in_jupyterlab(hub: ScaleLabUp):
    """Chromium: alice logs in; the "Course store" panel lists the datasets and the homes."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{hub.url}/hub/login")
            page.fill("#username_input", "alice")
            page.fill("#password_input", hub.password)
            page.click("#login_submit")
            page.wait_for_url("**/user/alice/lab**", timeout=240_000)
            tab = page.locator('.lm-TabBar-tab[title="Course store"]')
            expect(tab).to_be_visible(timeout=120_000)
            tab.click()
            panel = page.locator(f'[id$="_{drive_id()}"].jp-tree-finder-sidebar')
            expect(panel).to_contain_text("datasets/", timeout=60_000)
            expect(panel).to_contain_text("home/")
            expect(panel).not_to_contain_text("ops")
            DRIVE_SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(DRIVE_SCREENSHOT))
        finally:
            browser.close()


@pytest.mark.integration
def test_a_store_that_cannot_be_reached_costs_the_drive_not_the_server(tmp_path: Path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    down = f"c.ScaleLabSpawner.store_url = 'hdfs://127.0.0.1:{closed}/course'\n"
    with running(ScaleLabUp(tmp_path / "state", extra_config=down)) as hub:
        hub.start_server("dave")
        home = hub.server_api("dave", "GET", "/contents/")
        assert home.status_code == 200
        assert "lab1_millionsong_regression.ipynb" in {e["name"] for e in home.json()["content"]}
        opened = _contents(hub, "dave", "home/dave")
        assert opened.status_code >= 400, opened.text
        assert "cannot be reached" in opened.text and "store_url" in opened.text, opened.text
        assert "Traceback" not in opened.text
        assert hub.server_api("dave", "GET", "/contents/").status_code == 200  # still serving


def _server(config: Config | None = None) -> Any:
    from jupyter_server.serverapp import ServerApp

    return ServerApp(config=config or Config())


STORE_ENV = {"SCALELAB_STORE_URL": "file:///srv/course"}


def test_link_puts_the_drive_under_jupyter_fs():
    from jupyterfs.metamanager import MetaManager

    from scalelab.hub_ext.server.store_contents import StoreMetaManager

    app = _server()
    link(app, STORE_ENV)
    assert app.contents_manager_class is StoreMetaManager
    assert issubclass(StoreMetaManager, MetaManager)
    assert app.config.JupyterFs.resources[0]["url"] == DRIVE_URL
    assert app.config.JupyterFs.allow_user_resources is False


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


@pytest.mark.integration
def test_a_full_disk_under_the_drive_is_a_507_naming_the_disk(hub: ScaleLabUp):
    """A write that meets a full disk (ENOSPC, a real small tmpfs under alice's store home)
    is 507 naming the disk, not jupyter-fs' 500 "Unexpected error while saving file"; the
    file that was there is kept."""
    from tests.test_diskspace import fill, tmpfs

    full = hub.state_dir / "store" / "home/alice/full"
    try:
        with tmpfs(full, "256k"):
            (full / "kept.txt").write_text("kept\n")
            fill(full)
            body = {"type": "file", "format": "text", "content": "x" * 200_000}
            answer = _contents(hub, "alice", "home/alice/full/kept.txt", "PUT", json=body)
            assert answer.status_code == 507, answer.text
            message = answer.json()["message"]
            assert message.startswith(
                "home/alice/full/kept.txt in the course store was not saved: The disk holding "
            )
            assert f"(mount {full}, " in message and "Free space there" in message
            assert (full / "kept.txt").read_text() == "kept\n"
            assert sorted(p.name for p in full.iterdir()) == ["filler", "kept.txt"]
    finally:
        full.rmdir()


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
