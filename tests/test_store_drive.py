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

from scalelab.hub_ext.store_drive import DRIVE_URL, StoreDrive, drive_config, drive_id, link
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
    # jupyter-fs answers 500 for any save error; the guard's message is what tells the student.
    assert refused.status_code in (400, 403, 500), refused.text
    assert "datasets/ is read-only" in refused.text and "Traceback" not in refused.text
    assert (store / "datasets/songs/part-0.csv").read_text().startswith("year")
    refused = _contents(hub, "alice", "home/bob/planted.txt", "PUT", json=body)
    assert refused.status_code in (400, 403, 500), refused.text
    assert "you may read and write home/alice" in refused.text
    assert not (store / "home/bob/planted.txt").exists()
    assert _contents(hub, "alice", "datasets/songs", "DELETE").status_code >= 400
    assert (store / "datasets/songs/part-0.csv").exists()
    for target in ("home/bob/moved.txt", "datasets/songs/moved.txt", "ops/moved.txt"):
        body = {"path": f"{drive_id()}:{target}"}
        moved = _contents(hub, "alice", "home/alice/result.txt", "PATCH", json=body)
        assert moved.status_code >= 400, (target, moved.text)
        assert not (store / target).exists()
    stolen = {"path": f"{drive_id()}:home/alice/secret.txt"}
    moved = _contents(hub, "alice", "home/bob/secret.txt", "PATCH", json=stolen)
    assert moved.status_code >= 400 and (store / "home/bob/secret.txt").exists()
    assert (store / "home/alice/result.txt").read_text() == "rmse 10.3\n"


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
    assert response.status_code in (400, 403, 404), (path, response.status_code)
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

    app = _server()
    link(app, STORE_ENV)
    assert app.contents_manager_class is MetaManager
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
    assert app.contents_manager_class is MetaManager
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
