"""The course store as the folder ``store`` of the home (jupyter-fs' drive underneath) on a real
single-user server started by a real hub.

Every call goes through the contents REST API (``/api/contents/store/...``) the way JupyterLab's
file browser sends it, path-escape attempts included; a real Chromium opens the folder in
JupyterLab's file browser and saves a file there. The drive's pure settings are unit-tested too.

The parts that need no running service: ``tests/unit/test_store_drive.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
import warnings
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
import requests
from playwright.sync_api import expect, sync_playwright

from scalelab.common.ports import free_port
from scalelab.hub_ext.server.store_drive import DRIVE_URL, drive_id
from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO
from tests.support.hubproc import ScaleLabUp, running

with warnings.catch_warnings():
    # jupyter-fs 1.2.1's config module passes traitlets metadata the pre-4.1 way (upstream):
    # a DeprecationWarning at its first import, which pytest's "error" filter would raise.
    warnings.simplefilter("ignore", DeprecationWarning)
    import jupyterfs.metamanager  # noqa: F401


def _resources(hub: ScaleLabUp, user: str, method: str = "GET", **kwargs) -> requests.Response:
    """jupyter-fs' ``/user/<name>/jupyterfs/resources`` on the user's server."""
    url = f"{hub.url}/user/{user}/jupyterfs/resources"
    return requests.request(method, url, headers=hub.auth, timeout=60, **kwargs)


def _contents(hub: ScaleLabUp, user: str, path: str, method: str = "GET", **kwargs):
    """The contents API on ``store/<path>`` (``path`` relative to the store root)."""
    return hub.server_api(user, method, f"/contents/store/{path}".rstrip("/"), **kwargs)


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


def test_the_store_is_a_folder_of_the_home(hub: ScaleLabUp):
    resources = _resources(hub, "alice")
    assert resources.status_code == 200, resources.text
    [drive] = resources.json()
    assert (drive["name"], drive["drive"], drive["init"]) == ("Course store", drive_id(), True)
    home = hub.server_api("alice", "GET", "/contents/")
    assert home.status_code == 200, home.text
    entries = {e["name"]: e for e in home.json()["content"]}
    assert "lab1_millionsong_regression.ipynb" in entries
    folder = entries["store"]
    assert (folder["path"], folder["type"], folder["writable"]) == ("store", "directory", False)
    root = _contents(hub, "alice", "")
    assert root.status_code == 200, root.text
    assert (root.json()["path"], root.json()["name"]) == ("store", "store")
    assert sorted(e["path"] for e in root.json()["content"]) == ["store/datasets", "store/home"]
    homes = _contents(hub, "alice", "home").json()["content"]
    assert [(e["path"], e["writable"]) for e in homes] == [("store/home/alice", True)]
    listing = _contents(hub, "alice", "home/alice").json()
    assert listing["path"] == "store/home/alice" and listing["writable"] is True
    # links leaving the roots are left out
    assert [e["path"] for e in listing["content"]] == ["store/home/alice/to-data"]
    data = _contents(hub, "alice", "datasets/songs/part-0.csv").json()
    assert data["content"].startswith("year,f1")
    assert (data["path"], data["writable"]) == ("store/datasets/songs/part-0.csv", False)
    # Without content too (the file browser's check before it opens a file); and /files/.
    bare = _contents(hub, "alice", "datasets/songs/part-0.csv", params={"content": "0"}).json()
    assert (bare["path"], bare["content"], bare["size"]) == (data["path"], None, 17)
    raw = requests.get(
        f"{hub.url}/user/alice/files/store/datasets/songs/part-0.csv", headers=hub.auth, timeout=60
    )
    assert (raw.status_code, raw.text) == (200, "year,f1\n2001,0.5\n")
    missing = _contents(hub, "alice", "home/alice/nothing.txt")
    assert missing.status_code == 404, missing.text
    assert "store/home/alice/nothing.txt" in missing.text


def test_writes_go_to_the_home_only(hub: ScaleLabUp):
    store = hub.state_dir / "store"
    body = {"type": "file", "format": "text", "content": "rmse 10.3\n"}
    saved = _contents(hub, "alice", "home/alice/result.txt", "PUT", json=body)
    assert saved.status_code in (200, 201), saved.text
    assert (saved.json()["path"], saved.json()["size"]) == ("store/home/alice/result.txt", 10)
    assert (store / "home/alice/result.txt").read_text() == "rmse 10.3\n"
    body = {**body, "content": "rmse 9.87654\n"}  # saved again, longer: the size follows
    again = _contents(hub, "alice", "home/alice/result.txt", "PUT", json=body)
    assert (again.status_code, again.json()["size"]) == (200, 13), again.text
    got = _contents(hub, "alice", "home/alice/result.txt").json()
    assert (got["content"], got["size"]) == ("rmse 9.87654\n", 13)
    body = {**body, "content": "rmse 10.3\n"}
    assert _contents(hub, "alice", "home/alice/result.txt", "PUT", json=body).status_code == 200
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
    return {"path": f"store/{target}"}


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
            {"copy_from": f"store/{MINE}"},
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


@pytest.mark.parametrize(
    "path",
    [
        "home/bob/secret.txt",
        "home/bob",
        "ops/credentials",
        quote("../../ops/credentials", safe=""),
        quote("../x", safe=""),  # store/../x: not the home's x, refused by the store
        quote("home/alice/../../home/bob/secret.txt", safe=""),
        "home/alice/../bob/secret.txt",
        quote("/etc/passwd", safe=""),
        quote("home/bob/..", safe=""),
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
    # The store still works after the attempt.
    assert _contents(hub, "alice", "home/alice").status_code == 200
    assert Path(hub.state_dir / "store/ops/credentials").read_text() == "ops secret"


def _home(hub: ScaleLabUp, user: str = "alice") -> Path:
    """The user's JupyterLab home (the server's root folder)."""
    return hub.state_dir / "homes" / user


def test_the_file_browser_s_calls_work_in_the_store_home(hub: ScaleLabUp):
    """New file, folder and notebook (the file browser's New), rename into a folder, a
    notebook's checkpoints, delete: each with ``store/`` paths in and out."""
    store = hub.state_dir / "store" / "home/alice"
    made = {}
    for body in ({"type": "file", "ext": ".txt"}, {"type": "directory"}, {"type": "notebook"}):
        response = _contents(hub, "alice", "home/alice", "POST", json=body)
        assert response.status_code == 201, response.text
        made[body["type"]] = response.json()
    assert made["file"]["path"] == "store/home/alice/untitled.txt"
    assert made["directory"]["path"] == "store/home/alice/Untitled Folder"
    assert made["notebook"]["path"] == "store/home/alice/Untitled.ipynb"
    assert response.headers["Location"].endswith("/api/contents/store/home/alice/Untitled.ipynb")
    assert (store / "untitled.txt").read_text() == ""
    assert (store / "Untitled Folder").is_dir()
    assert json.loads((store / "Untitled.ipynb").read_text())["nbformat"] == 4
    second = _contents(hub, "alice", "home/alice", "POST", json={"type": "file", "ext": ".txt"})
    assert second.json()["path"] == "store/home/alice/untitled1.txt"  # exists checks mapped
    assert _contents(hub, "alice", "home/alice/untitled1.txt", "DELETE").status_code == 204

    moved = _contents(
        hub, "alice", "home/alice/untitled.txt", "PATCH",
        json={"path": "store/home/alice/Untitled Folder/notes.txt"},
    )  # fmt: skip
    assert moved.status_code == 200, moved.text
    assert moved.json()["path"] == "store/home/alice/Untitled Folder/notes.txt"
    assert (store / "Untitled Folder/notes.txt").exists()
    assert not (store / "untitled.txt").exists()

    checkpoints = _contents(hub, "alice", "home/alice/Untitled.ipynb/checkpoints")
    assert checkpoints.status_code == 200, checkpoints.text
    made_one = _contents(hub, "alice", "home/alice/Untitled.ipynb/checkpoints", "POST")
    assert made_one.status_code == 201, made_one.text

    for path in ("home/alice/Untitled.ipynb", "home/alice/Untitled Folder"):
        deleted = _contents(hub, "alice", path, "DELETE")
        assert deleted.status_code == 204, deleted.text
    assert not (store / "Untitled.ipynb").exists()
    assert not (store / "Untitled Folder").exists()


CHUNK = 1024 * 1024  # JupyterLab's upload chunk: files over 1 MiB are sent in chunks


def test_a_chunked_upload_into_the_store_is_the_whole_file(hub: ScaleLabUp):
    data = bytes(range(256)) * (3 * CHUNK // 256 + 1000)
    pieces = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
    assert len(pieces) == 4
    for n, piece in enumerate(pieces, 1):
        body = {
            "type": "file", "format": "base64", "name": "big.bin",
            "chunk": -1 if n == len(pieces) else n,
            "content": base64.b64encode(piece).decode("ascii"),
        }  # fmt: skip
        answer = _contents(hub, "alice", "home/alice/big.bin", "PUT", json=body)
        assert answer.status_code in (200, 201), answer.text
    assert (answer.json()["path"], answer.json()["size"]) == ("store/home/alice/big.bin", len(data))
    on_disk = hub.state_dir / "store/home/alice/big.bin"
    assert on_disk.read_bytes() == data
    on_disk.unlink()
    body = {"type": "file", "format": "base64", "chunk": 1, "content": "eA=="}
    refused = _contents(hub, "alice", "datasets/songs/big.bin", "PUT", json=body)
    assert refused.status_code == 403 and READ_ONLY in refused.json()["message"]
    assert not (hub.state_dir / "store/datasets/songs/big.bin").exists()


def test_copies_cross_between_home_and_store_and_moves_are_refused_losing_nothing(
    hub: ScaleLabUp,
):
    home, store = _home(hub), hub.state_dir / "store"
    (home / "notes.txt").write_text("from the home\n")
    try:
        copied = _contents(hub, "alice", "home/alice", "POST", json={"copy_from": "notes.txt"})
        assert copied.status_code == 201, copied.text
        assert copied.json()["path"] == "store/home/alice/notes.txt"
        assert (store / "home/alice/notes.txt").read_text() == "from the home\n"
        back = hub.server_api(
            "alice", "POST", "/contents/", json={"copy_from": "store/datasets/songs/part-0.csv"}
        )
        assert (back.status_code, back.json()["path"]) == (201, "part-0.csv"), back.text
        assert (home / "part-0.csv").read_text().startswith("year,f1")

        into = hub.server_api(
            "alice", "PATCH", "/contents/notes.txt", json={"path": "store/home/alice/moved.txt"}
        )
        assert into.status_code == 400, into.text
        assert into.json()["message"].startswith(
            "Moving 'notes.txt' to the course store is not possible"
        )
        assert "Copy it instead" in into.json()["message"]
        out = _contents(hub, "alice", "home/alice/notes.txt", "PATCH", json={"path": "moved.txt"})
        assert out.status_code == 400 and "to your home is not possible" in out.json()["message"]
        assert (home / "notes.txt").exists() and (store / "home/alice/notes.txt").exists()
        assert not (home / "moved.txt").exists()
        assert not (store / "home/alice/moved.txt").exists()

        # The store's folder itself: not deleted, not renamed, its name not taken.
        for method, body in (("DELETE", None), ("PATCH", {"path": "mine"})):
            answer = hub.server_api("alice", method, "/contents/store", json=body)
            assert answer.status_code == 403, answer.text
            assert "'store' is not allowed" in answer.json()["message"]
        (home / "Untitled Folder").mkdir()
        taken = hub.server_api(
            "alice", "PATCH", "/contents/Untitled Folder", json={"path": "store"}
        )
        assert taken.status_code == 400 and "choose another name" in taken.json()["message"]
        assert (home / "Untitled Folder").is_dir()
        assert sorted(p.name for p in (store).iterdir()) == ["datasets", "home", "ops"]
    finally:
        for leftover in ("notes.txt", "part-0.csv"):
            (home / leftover).unlink(missing_ok=True)
        (store / "home/alice/notes.txt").unlink(missing_ok=True)
        if (home / "Untitled Folder").is_dir():
            (home / "Untitled Folder").rmdir()


def test_a_real_store_folder_in_the_home_wins_and_the_server_warns(hub: ScaleLabUp):
    real = _home(hub) / "store"
    real.mkdir()
    (real / "mine.txt").write_text("my own\n")
    try:
        root = hub.server_api("alice", "GET", "/contents/").json()["content"]
        [entry] = [e for e in root if e["name"] == "store"]
        assert entry["writable"] is True  # the real folder's model, not the course store's
        listing = hub.server_api("alice", "GET", "/contents/store").json()
        assert [e["path"] for e in listing["content"]] == ["store/mine.txt"]
        saved = hub.server_api("alice", "PUT", "/contents/store/new.txt", json=TEXT)
        assert saved.status_code == 201, saved.text
        assert (real / "new.txt").read_text() == "planted\n"
        assert not (hub.state_dir / "store/new.txt").exists()
        log = hub.state_dir / "logs/servers/alice/server.log"
        deadline = time.monotonic() + 30
        while "c.StoreDrive.folder_name" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        [line] = [line for line in log.read_text().splitlines() if "holds its own 'store'" in line]
        assert line.startswith("[W ") and "c.StoreDrive.folder_name" in line, line
    finally:
        for child in real.iterdir():
            child.unlink()
        real.rmdir()
    again = hub.server_api("alice", "GET", "/contents/store").json()
    assert sorted(e["path"] for e in again["content"]) == ["store/datasets", "store/home"]


def test_a_notebook_in_the_store_gets_a_kernel_started_in_the_home(hub: ScaleLabUp):
    notebook = {"type": "notebook", "content": {
        "cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }}  # fmt: skip
    saved = _contents(hub, "alice", "home/alice/run.ipynb", "PUT", json=notebook)
    assert saved.status_code == 201, saved.text
    kernel = hub.server_api("alice", "GET", "/kernelspecs").json()["default"]
    body = {"path": "store/home/alice/run.ipynb", "type": "notebook", "name": "run.ipynb",
            "kernel": {"name": kernel}}  # fmt: skip
    session = hub.server_api("alice", "POST", "/sessions", json=body)
    assert session.status_code == 201, session.text
    try:
        kernel_id = session.json()["kernel"]["id"]
        [process] = [
            p for p in hub.descendants()
            if any(kernel_id in arg for arg in p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
        ]  # fmt: skip
        assert process.cwd() == str(_home(hub))
    finally:
        hub.server_api("alice", "DELETE", f"/sessions/{session.json()['id']}")
        (hub.state_dir / "store/home/alice/run.ipynb").unlink()


SCREENSHOT = REPO / "docs" / "screenshot-store-drive.png"


@pytest.mark.browser
def test_a_student_saves_a_file_in_the_store_from_jupyterlab_s_file_browser(hub: ScaleLabUp):
    """Chromium: alice opens store/home/alice in JupyterLab's own file browser, makes a file
    there with its New File, names it, writes and saves it; the listing shows its size and the
    file is in the store. jupyter-fs' own sidebar is not shown."""
    sizes = requests.put(  # the file size column: a setting students may turn on themselves
        f"{hub.url}/user/alice/lab/api/settings/@jupyterlab/filebrowser-extension:browser",
        headers=hub.auth, json={"raw": json.dumps({"showFileSizeColumn": True})}, timeout=60,
    )  # fmt: skip
    assert sizes.status_code == 204, sizes.text
    on_disk = hub.state_dir / "store/home/alice/notes.txt"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(f"{hub.url}/hub/login?next=/user/alice/lab/tree/store/home/alice")
            page.fill("#username_input", "alice")
            page.fill("#password_input", hub.password)
            page.click("#login_submit")
            page.wait_for_url("**/user/alice/lab**", timeout=240_000)
            browser_panel = page.locator("#filebrowser")
            crumbs = browser_panel.locator(".jp-BreadCrumbs")
            expect(crumbs).to_contain_text("alice", timeout=120_000)
            listing = browser_panel.locator(".jp-DirListing-content")
            expect(listing).to_contain_text("to-data", timeout=60_000)
            expect(page.locator(".jp-tree-finder-sidebar")).to_have_count(0)

            listing.click(button="right", position={"x": 120, "y": 200})
            page.get_by_role("menuitem", name="New File", exact=True).click()
            editor = browser_panel.locator(".jp-DirListing-editor")
            expect(editor).to_be_visible(timeout=30_000)
            editor.fill("notes.txt")
            editor.press("Enter")
            item = listing.locator(".jp-DirListing-item", has_text="notes.txt")
            expect(item).to_be_visible(timeout=30_000)
            item.dblclick()
            text = page.locator(".jp-FileEditor .cm-content")
            expect(text).to_be_visible(timeout=60_000)
            text.click()
            page.keyboard.type("rmse 10.3\n")
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                on_disk.exists() and on_disk.read_text() == "rmse 10.3\n"
            ):
                time.sleep(0.5)
            assert on_disk.read_text() == "rmse 10.3\n"
            size = item.locator(".jp-DirListing-itemFileSize")
            expect(size).to_have_text(re.compile(r"^\s*10\s*B\s*$"), timeout=30_000)
            page.screenshot(path=str(SCREENSHOT))
        finally:
            browser.close()
            on_disk.unlink(missing_ok=True)


def test_a_store_that_cannot_be_reached_costs_the_drive_not_the_server(tmp_path: Path):
    closed = free_port()  # nothing listens there
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


def test_a_full_disk_under_the_drive_is_a_507_naming_the_disk(hub: ScaleLabUp):
    """A write that meets a full disk (ENOSPC, a real small tmpfs under alice's store home)
    is 507 naming the disk, not jupyter-fs' 500 "Unexpected error while saving file"; the
    file that was there is kept."""
    from tests.unit.test_diskspace import fill, tmpfs

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
