"""A full home on a real single-user server with ScaleLab's extension: notebooks still open
(nbformat's notary writes nothing they need), and a save that cannot fit is a 507 naming the
disk, with the notebook left as it was.

The parts that need no running service: ``tests/unit/test_full_disk.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import nbformat
import pytest
import requests

from scalelab.common.ports import free_port
from tests.unit.test_diskspace import fill, tmpfs

TOKEN = "full-disk-test-token"


class Server:
    """A ``jupyter server`` (the venv's, ScaleLab's extension enabled by its installed config)
    serving ``home``, with ``HOME`` there as a spawner gives it; ``env`` and ``args``: more
    environment variables and server arguments."""

    def __init__(
        self,
        home: Path,
        runtime_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **(env or {}), "HOME": str(home)}
        env.pop("JUPYTER_DATA_DIR", None)
        if runtime_dir is not None:
            env["JUPYTER_RUNTIME_DIR"] = str(runtime_dir)
        self.log = (runtime_dir or home.parent) / f"server-{self.port}.log"
        self._log_file = open(self.log, "wb")
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("jupyter-server")),
                f"--ServerApp.root_dir={home}",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",  # on a taken port: fail, not serve on another
                f"--IdentityProvider.token={TOKEN}",
                "--ServerApp.open_browser=False",
                "--allow-root",
                *args,
            ],
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if requests.get(f"{self.url}/api/status", headers=self.auth, timeout=2).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server did not start:\n{self.log.read_text()}")

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {TOKEN}"}

    def contents(self, method: str, path: str, **kwargs) -> requests.Response:
        url = f"{self.url}/api/contents/{path}"
        return requests.request(method, url, headers=self.auth, timeout=30, **kwargs)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log_file.close()
        log = self.log.read_text()
        assert "scalelab.hub_ext.server.extension | error" not in log, log  # linked and loaded


def _notebook(text: str, trusted: bool = False) -> dict:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(f"print({text!r})")
    if trusted:
        cell.metadata["trusted"] = True
    nb.cells = [cell]
    return json.loads(nbformat.writes(nb))


@pytest.fixture
def full_home(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "home", "1m") as home:
        yield home


def test_a_home_that_fills_up_still_opens_notebooks_and_refuses_saves_with_507(full_home: Path):
    home = full_home
    mine = _notebook("mine")
    (home / "mine.ipynb").write_text(json.dumps(mine))
    server = Server(home, runtime_dir=home.parent)
    try:
        saved = server.contents(
            "PUT", "trusted.ipynb", json={"type": "notebook", "content": _notebook("ok", True)}
        )
        assert saved.status_code in (200, 201), saved.text
        fill(home)
        before = (home / "mine.ipynb").read_bytes()

        for name in ("mine.ipynb", "trusted.ipynb"):
            opened = server.contents("GET", name)
            assert opened.status_code == 200, (name, opened.text)
            assert opened.json()["content"]["cells"][0]["cell_type"] == "code"
        trusted = server.contents("GET", "trusted.ipynb").json()["content"]
        assert trusted["cells"][0]["metadata"]["trusted"] is True  # still trusted, not rewritten

        bigger = _notebook("mine, with much more" + "x" * 20_000)
        refused = server.contents("PUT", "mine.ipynb", json={"type": "notebook", "content": bigger})
        assert refused.status_code == 507, refused.text
        message = refused.json()["message"]
        assert message.startswith("mine.ipynb was not saved, and is as it was. ")
        assert f"The disk holding {home}/mine.ipynb (mount {home}, " in message
        assert "is full: this needs " in message and "Free space there" in message
        assert (home / "mine.ipynb").read_bytes() == before
        assert not list(home.glob(".~*")) and not list(home.glob("*.part"))

        (home / "filler").unlink()  # room again: the same save goes through
        again = server.contents("PUT", "mine.ipynb", json={"type": "notebook", "content": bigger})
        assert again.status_code == 200, again.text
    finally:
        server.stop()
    key = home / ".local" / "share" / "jupyter" / "notebook_secret"
    assert key.read_bytes().strip() and key.stat().st_mode & 0o777 == 0o600


def test_a_home_full_before_the_first_notebook_opens_it(full_home: Path, tmp_path: Path):
    home = full_home
    (home / "mine.ipynb").write_text(json.dumps(_notebook("mine")))
    data_dir = home / ".local" / "share" / "jupyter"
    data_dir.mkdir(parents=True)  # no signing key yet: nbformat would write one on this read
    fill(home)
    runtime = tmp_path / "runtime"  # a spawner's runtime folder outside the home
    runtime.mkdir()
    server = Server(home, runtime_dir=runtime)
    try:
        opened = server.contents("GET", "mine.ipynb")
        assert opened.status_code == 200, opened.text
        assert opened.json()["content"]["cells"][0]["source"] == "print('mine')"
    finally:
        server.stop()
    log = server.log.read_text()
    assert "The notebook-signing key is kept for this server's life only" in log
    assert f"The disk holding {data_dir}/notebook_secret (mount {home}, " in log
    assert not (data_dir / "notebook_secret").exists()  # no empty key left to sign with later
    assert not list(data_dir.glob(".notebook_secret*"))
