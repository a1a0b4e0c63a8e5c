"""The idle-GPU warning as a JupyterLab notification, in a real browser (Chromium through
Playwright) with JupyterLab open and no cell running, through the real hub, GPU monitor and
single-user servers. A declared inventory of two fake GPUs stands in for NVML; the test sets
their utilisation through the hub's test GPU source, tests.support.fake_gpus (as in
test_culling_hub.py).

bob's GPU goes idle: his JupyterLab shows a warning toast that names the GPU, the idle time and
when the server stops; his GPU working again calls it off with an "in use again" notification;
idle again, he is warned again and his server is stopped. alice (busy GPU) and carol (no GPU),
with JupyterLab open all along, get no toast."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from scalelab.hub_ext.services.lab_toast import stop_time_utc
from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO
from tests.integration.hub.test_culling_hub import _holder_gpu, _running, _wait, culling_hub
from tests.support.hubproc import ScaleLabUp

GPU_IDLE_TIMEOUT_S = 60
GPU_IDLE_WARNING_S = 48  # warned about 12 s into the idle spell, stopped 48 s later
TOAST = ".Toastify__toast"
SCREENSHOT = REPO / "docs" / "screenshot-idle-gpu-toast.png"


@pytest.fixture
def hub(tmp_path: Path):
    with culling_hub(
        tmp_path,
        idle_timeout=3600,
        gpu_idle_timeout=GPU_IDLE_TIMEOUT_S,
        gpu_idle_warning=GPU_IDLE_WARNING_S,
    ) as up:
        yield up


def _open_lab(browser, hub: ScaleLabUp, user: str) -> Page:
    """A new browser context logged in as ``user`` through the login form, on JupyterLab."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_load_state()
    page.goto(f"{hub.url}/user/{user}/lab")
    launcher = page.locator(".jp-LauncherCard", has_text="PyTorch")
    expect(launcher.first).to_be_visible(timeout=180_000)
    return page


def test_an_idle_gpu_is_warned_in_jupyterlab_and_busy_or_cpu_servers_are_not(hub: ScaleLabUp):
    hub.start_server("alice", {"profile": "gpu-1"})
    gpu_a = _holder_gpu(hub, "alice")
    hub.start_server("bob", {"profile": "gpu-1"})
    gpu_b = _holder_gpu(hub, "bob")
    hub.start_server("carol", {"profile": "cpu"})
    busy = {gpu_a: 90, gpu_b: 90}  # nobody idle while the pages load
    hub.utilization.write_text(json.dumps(busy))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            pages = {user: _open_lab(browser, hub, user) for user in ("alice", "bob", "carol")}
            # JupyterLab is open everywhere, no cell runs; now bob's GPU goes idle
            idle_from = time.time()
            hub.utilization.write_text(json.dumps({gpu_a: 90, gpu_b: 0}))

            toast = pages["bob"].locator(TOAST, has_text="ScaleLab:")
            expect(toast).to_be_visible(timeout=(GPU_IDLE_TIMEOUT_S - 10) * 1000)
            text = toast.inner_text()
            assert f"ScaleLab: GPU {gpu_b} idle for " in text, text
            assert "…" not in text, text  # shown whole, not cut at JupyterLab's 140 characters
            idle_for = re.search(r"idle for (\d+) s:", text)
            assert idle_for, text
            assert GPU_IDLE_TIMEOUT_S - GPU_IDLE_WARNING_S <= int(idle_for.group(1)), text
            assert int(idle_for.group(1)) <= time.time() - idle_from + 1, text
            # the idle spell starts at the monitor's first poll after the change (2 s polls)
            stops = {stop_time_utc(idle_from + GPU_IDLE_TIMEOUT_S + d) for d in range(31)}
            stop_clock = re.search(r"your server stops at about (\d\d:\d\d UTC) \(in \d+ s\)", text)
            assert stop_clock and stop_clock.group(1) in stops, text
            assert "files are kept" in text
            pages["bob"].screenshot(path=str(SCREENSHOT))

            # bob's GPU works again: the warning is called off in JupyterLab, then idles again
            hub.utilization.write_text(json.dumps({gpu_a: 90, gpu_b: 80}))
            again = pages["bob"].locator(TOAST, has_text="in use again")
            expect(again).to_be_visible(timeout=60_000)
            assert f"your GPU(s) {gpu_b} are in use again" in again.inner_text()
            assert "will not be stopped" in again.inner_text()
            assert _running(hub, "bob")
            hub.utilization.write_text(json.dumps({gpu_a: 90, gpu_b: 0}))

            _wait(lambda: not _running(hub, "bob"), GPU_IDLE_TIMEOUT_S + 60, "bob is stopped")
            for user in ("alice", "carol"):  # open all along, through bob's warning and stop
                expect(pages[user].locator(TOAST, has_text="GPU")).to_have_count(0)
                expect(pages[user].locator(TOAST, has_text="ScaleLab")).to_have_count(0)
            assert _running(hub, "alice") and _running(hub, "carol")
        finally:
            browser.close()
    log = (hub.state_dir / "logs" / "jupyterhub.log").read_text()
    assert "no JupyterLab notification for" not in log
