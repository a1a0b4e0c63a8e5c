"""Lab delivery through a real ``scalelab up``: at server start, and on the "Get new labs" page
and API of the server extension (what JupyterLab's Course menu opens)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import requests

from scalelab.hub_ext.labs.sync import bundled_labs
from tests.support.hubproc import ScaleLabUp, running

LAB1, LAB2, LAB3 = (
    "lab1_millionsong_regression.ipynb",
    "lab2_fashion_mnist_convnet.ipynb",
    "lab3_distributed_training.ipynb",
)


def _request(hub: ScaleLabUp, method: str, path: str) -> requests.Response:
    """A call to alice's server outside its /api, with the test service's token."""
    return requests.request(method, f"{hub.url}/user/alice{path}", headers=hub.auth, timeout=60)


def _older(content: bytes) -> bytes:
    """An earlier release of a lab: the same notebook with a different first cell."""
    nb = nbformat.reads(content.decode(), as_version=4)
    nb.cells[0].source = "# An earlier version of this lab"
    return (nbformat.writes(nb) + "\n").encode()


def test_server_start_and_the_get_new_labs_button_deliver_without_overwriting(tmp_path: Path):
    released = tmp_path / "course-release"  # the instructor's release folder
    released.mkdir()
    current = bundled_labs()
    for name, content in current.items():
        (released / name).write_bytes(_older(content))
    up = ScaleLabUp(
        tmp_path / "state",
        extra_config=f"c.Spawner.environment = {{'SCALELAB_LABS_DIR': {str(released)!r}}}\n",
    )
    home = up.state_dir / "homes" / "alice"
    with running(up) as hub:
        hub.start_server("alice")
        assert (home / LAB1).read_bytes() == _older(current[LAB1])  # delivered at start

        page = _request(hub, "GET", "/scalelab/labs")
        assert page.status_code == 200
        assert "Get new labs" in page.text and "version 1" in page.text

        # The student works on lab 1; the instructor releases new versions of both labs.
        mine = nbformat.read(home / LAB1, as_version=4)
        mine.cells.append(nbformat.v4.new_code_cell("my_answer = 42"))
        nbformat.write(mine, home / LAB1)
        edited = (home / LAB1).read_bytes()
        for name, content in current.items():
            (released / name).write_bytes(content)

        response = _request(hub, "POST", "/scalelab/api/labs/sync")
        assert response.status_code == 200, response.text
        report = response.json()
        beside = "lab1_millionsong_regression (v2).ipynb"
        assert report["beside"] == [beside] and report["updated"] == [LAB2, LAB3]
        assert (home / LAB1).read_bytes() == edited
        assert (home / LAB2).read_bytes() == current[LAB2]
        assert (home / LAB3).read_bytes() == current[LAB3]
        assert any(beside in message for message in report["messages"])

        # The button again (the page's form): nothing new, said so.
        again = _request(hub, "POST", "/scalelab/labs")
        assert again.status_code == 200 and "nothing new" in again.text
        manifest = json.loads((home / ".scalelab" / "labs.json").read_text())
        assert {entry["version"] for entry in manifest["labs"].values()} == {2}
