"""Ops in a real browser (Chromium through Playwright): the GPU board, and a student's server
log followed live on the hub's admin page. Saves the operator's guide's screenshots."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO
from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, execute, running

OPS_PASSWORD = "ops-" + "z" * 40
BOARD_SCREENSHOT = REPO / "docs" / "screenshot-gpu-board.png"
LOG_SCREENSHOT = REPO / "docs" / "screenshot-server-log.png"


@pytest.fixture
def hub(tmp_path: Path):
    up = ScaleLabUp(
        tmp_path / "state",
        extra_config=TWO_FAKE_GPUS
        + "c.Authenticator.admin_users = {'ops'}\n"
        + f"c.SharedPasswordAuthenticator.admin_password = {OPS_PASSWORD!r}\n",
    )
    with running(up):
        yield up


def test_ops_sees_the_gpu_board_and_follows_a_server_log_live(hub: ScaleLabUp):
    hub.start_server("alice", {"profile": "gpu-1"})
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pytorch"}).json()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{hub.url}/hub/login")
            page.fill("#username_input", "ops")
            page.fill("#password_input", OPS_PASSWORD)
            page.click("#login_submit")
            page.wait_for_load_state()

            page.goto(f"{hub.url}/hub/scalelab/gpus")
            expect(page.locator("#scalelab-gpus")).to_contain_text("alice/")
            page.screenshot(path=str(BOARD_SCREENSHOT))

            page.goto(f"{hub.url}/hub/scalelab/logs/alice")
            lines = page.locator("#scalelab-log-lines")
            expect(lines).to_contain_text("ScaleLab: server alice/ starting", timeout=30_000)
            expect(page.locator("#scalelab-log-status")).to_have_text("following")
            code = "import sys; print('written after the page opened', file=sys.__stderr__)"
            with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
                outcome = pool.submit(asyncio.run, execute(hub, "alice", kernel["id"], code))
                assert outcome.result()["status"] == "ok"
            expect(lines).to_contain_text("written after the page opened", timeout=30_000)
            page.screenshot(path=str(LOG_SCREENSHOT))
        finally:
            browser.close()
