"""A student in a real browser: Debian's Chromium, driven by Playwright, through login -> spawn
form (profiles with free-GPU counts, from a declared inventory of two fake GPUs) -> JupyterLab
showing ScaleLab's three kernels and the three labs. Saves the README's and the guides'
screenshots."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.conftest import REPO
from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running, server_environ

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags for a closed network and a root user (see the machine notes in the README of env).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT = REPO / "docs" / "screenshot-launcher.png"
FORM_SCREENSHOT = REPO / "docs" / "screenshot-spawn-form.png"


@pytest.fixture
def hub(tmp_path: Path):
    with running(ScaleLabUp(tmp_path / "state", extra_config=TWO_FAKE_GPUS)) as up:
        yield up


def test_student_logs_in_and_sees_the_three_kernels_and_the_labs(hub: ScaleLabUp, tmp_path: Path):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{hub.url}/hub/login")
            expect(page.locator("#scalelab-login-banner")).to_contain_text("ScaleLab")

            page.fill("#username_input", "bob")
            page.fill("#password_input", "wrong-password")
            page.click("#login_submit")
            expect(page.locator(".login_error")).to_be_visible()

            page.fill("#username_input", "bob")
            page.fill("#password_input", hub.password)
            page.click("#login_submit")

            form = page.locator("#scalelab-options")
            expect(form).to_be_visible(timeout=60_000)
            for name in ("CPU only", "1 GPU", "2 GPUs"):
                expect(form.get_by_text(name, exact=True)).to_be_visible()
            expect(form.locator(".scalelab-free").first).to_have_text("2 of 2 GPUs free")
            expect(page.locator("#profile-cpu")).to_be_checked()
            page.screenshot(path=str(FORM_SCREENSHOT))
            page.get_by_role("button", name="Start").click()
            page.wait_for_url("**/user/bob/lab**", timeout=240_000)

            cards = page.locator(".jp-Launcher-section").filter(has_text="Notebook")
            for name in ("PySpark", "TensorFlow", "PyTorch"):
                expect(cards.locator(".jp-LauncherCard", has_text=name)).to_be_visible(
                    timeout=120_000
                )
            labels = cards.locator(".jp-LauncherCard-label").all_inner_texts()
            assert sorted(labels) == ["PySpark", "PyTorch", "TensorFlow"]
            listing = page.locator(".jp-DirListing-content")
            expect(listing).to_contain_text("lab1_millionsong_regression.ipynb", timeout=60_000)
            expect(listing).to_contain_text("lab2_fashion_mnist_convnet.ipynb")
            expect(listing).to_contain_text("lab3_distributed_training.ipynb")

            # ScaleLab's JupyterLab overrides switch the "Jupyter news" prompt off for students.
            expect(page.get_by_text("official Jupyter news")).to_have_count(0)
            # The File menu has one "Log Out", the hub's (JupyterLab's own stays hidden).
            page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
            expect(page.get_by_text("Hub Control Panel", exact=True)).to_be_visible()
            log_outs = page.locator(".lm-Menu-itemLabel:visible").get_by_text("Log Out", exact=True)
            assert log_outs.count() == 1
            page.keyboard.press("Escape")
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))
        finally:
            browser.close()


def test_student_waits_in_the_queue_sees_the_position_cancels_and_starts_cpu_only(
    hub: ScaleLabUp,
):
    for user in ("alice", "bob"):  # both fake GPUs taken through the REST API
        hub.start_server(user, {"profile": "gpu-1"})
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{hub.url}/hub/login")
            page.fill("#username_input", "carol")
            page.fill("#password_input", hub.password)
            page.click("#login_submit")
            expect(page.locator(".scalelab-free").first).to_have_text("0 of 2 GPUs free")
            page.check("#profile-gpu-1")
            page.get_by_role("button", name="Start").click()

            message = page.locator("#progress-message")
            expect(message).to_contain_text("you are number 1 of 1 in the queue", timeout=60_000)
            expect(page.locator("#scalelab-queue-help")).to_be_visible()
            page.screenshot(path=str(REPO / "docs" / "screenshot-queue.png"))

            page.get_by_role("button", name="Stop Server").click()
            page.wait_for_url("**/hub/user/carol/**", timeout=60_000)  # "not running" now
            page.goto(f"{hub.url}/hub/spawn")
            expect(page.locator("#scalelab-options")).to_be_visible(timeout=60_000)
            page.check("#profile-cpu")
            page.get_by_role("button", name="Start").click()
            page.wait_for_url("**/user/carol/lab**", timeout=240_000)
        finally:
            browser.close()
    assert server_environ(hub, "carol")["CUDA_VISIBLE_DEVICES"] == ""
    board = hub.api("GET", "/scalelab/gpus").json()
    assert board["queue"] == []
    assert sorted(g["holder"]["user"] for g in board["gpus"]) == ["alice", "bob"]
