"""Lab 2's progress bars in a real browser (issue 13): a student on a CPU profile runs Lab 2's
first cells in JupyterLab; writing the TFRecord shards shows tqdm's bars as JupyterLab widgets
(ipywidgets' front end, served by jupyterlab_widgets), not the text of a widget that did not
render, and nothing on stderr. Saves the students' guide's screenshot of those bars."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from scalelab.store import DATASETS, fetch_dataset, open_store
from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.browser.test_browser_spark_ui import _run_cell
from tests.conftest import REPO
from tests.support.hubproc import ScaleLabUp, running

LAB2 = "lab2_fashion_mnist_convnet.ipynb"
SCREENSHOT = REPO / "docs" / "screenshot-lab2-progress.png"
#: Code cells from the parameters cell to the one that writes the TFRecord shards.
UP_TO_TFRECORDS = 6
#: A red stderr box in JupyterLab's output area.
STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


def test_lab2_shows_its_progress_bars_as_widgets(tmp_path: Path, shared_data: Path):
    state = tmp_path / "state"
    # The course store of the hub, with Fashion-MNIST, as `scalelab data fetch` leaves it.
    store = open_store((state / "store").as_uri())
    fetch_dataset(DATASETS["fashion-mnist"], store, mirror=shared_data, log=lambda _line: None)
    with running(ScaleLabUp(state)) as hub:
        hub.start_server("gina")  # the default profile: CPU only
        # The instructor version stands for the student's own, exercises done.
        content = json.loads((REPO / "notebooks" / LAB2).read_text())
        body = {"type": "notebook", "format": "json", "content": content}
        saved = hub.server_api("gina", "PUT", f"/contents/{LAB2}", data=json.dumps(body))
        assert saved.status_code in (200, 201), saved.text
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{hub.url}/hub/login")
                page.fill("#username_input", "gina")
                page.fill("#password_input", hub.password)
                page.click("#login_submit")
                page.wait_for_url("**/user/gina/lab**", timeout=240_000)
                page.goto(f"{hub.url}/user/gina/lab/tree/{LAB2}")
                status = page.locator("#jp-main-statusbar")
                expect(status).to_contain_text("TensorFlow | Idle", timeout=180_000)
                for index in range(UP_TO_TFRECORDS):
                    cell = _run_cell(page, index)
                    expect(cell.locator(STDERR)).to_have_count(0)
                # One bar per split, drawn by the widget front end, full.
                bars = cell.locator(".widget-hprogress")
                expect(bars).to_have_count(3, timeout=60_000)
                expect(cell).to_contain_text("writing train: 100%")
                expect(cell).to_contain_text("55000/55000")
                expect(cell).not_to_contain_text("HBox(")  # a widget that did not render
                page.keyboard.press("Escape")
                page.keyboard.press("Control+b")  # the file browser folded: room for the lab
                expect(page.locator("#filebrowser")).to_be_hidden()
                cell.evaluate("(c) => c.scrollIntoView({block: 'center'})")
                page.screenshot(path=str(SCREENSHOT))
            finally:
                browser.close()
