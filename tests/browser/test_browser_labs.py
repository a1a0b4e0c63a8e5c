"""A student in a real browser (Chromium through Playwright) gets new labs from JupyterLab's
Course menu: the menu entry (ScaleLab's JupyterLab settings overrides, no JupyterLab build) opens
the server extension's page, whose button copies the labs in and says what it did; then hands a
lab in from the same menu and sees the receipt."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO
from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running

LAB1 = "lab1_millionsong_regression.ipynb"
LAB2 = "lab2_fashion_mnist_convnet.ipynb"
HANDIN_SCREENSHOT = REPO / "docs" / "screenshot-handin.png"


def test_course_menu_opens_the_labs_page_and_its_button_brings_a_deleted_lab_back_only_if_new(
    tmp_path: Path,
):
    with running(ScaleLabUp(tmp_path / "state", extra_config=TWO_FAKE_GPUS)) as hub:
        home = hub.state_dir / "homes" / "dora"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"{hub.url}/hub/login")
                page.fill("#username_input", "dora")
                page.fill("#password_input", hub.password)
                page.click("#login_submit")
                expect(page.locator("#scalelab-options")).to_be_visible(timeout=60_000)
                page.get_by_role("button", name="Start").click()
                page.wait_for_url("**/user/dora/lab**", timeout=240_000)
                listing = page.locator(".jp-DirListing-content")
                expect(listing).to_contain_text(LAB1, timeout=120_000)
                (home / LAB1).unlink()  # the student deletes a lab

                page.locator(".lm-MenuBar-itemLabel", has_text="Course").click()
                with page.context.expect_page() as opened:
                    page.locator(".lm-Menu-itemLabel", has_text="Get New Labs").click()
                labs = opened.value
                labs.wait_for_load_state()
                assert labs.url.endswith("/user/dora/scalelab/labs")
                expect(labs.locator("h1")).to_have_text("Course labs")
                labs.locator("#get-labs").click()
                # Already delivered, then deleted: not forced back.
                expect(labs.locator("#sync-messages")).to_contain_text("nothing new")
                assert not (home / LAB1).exists()

                # Hand-in (issue 33): Course > Hand In... hands in the notebook in the home.
                page.bring_to_front()
                page.locator(".lm-MenuBar-itemLabel", has_text="Course").click()
                with page.context.expect_page() as opened:
                    page.locator(".lm-Menu-itemLabel", has_text="Hand In").click()
                handin = opened.value
                handin.wait_for_load_state()
                assert handin.url.endswith("/user/dora/scalelab/handin")
                expect(handin.locator(f"#lab-{LAB1[:-6]}")).to_contain_text("not in your home")
                row = handin.locator(f"#lab-{LAB2[:-6]}")
                expect(row).to_contain_text("not yet")
                row.get_by_role("button", name="Hand in").click()
                receipt = handin.locator("#handin-receipt")
                expect(receipt).to_contain_text(f"{LAB2[:-6]} version 1, handed in")
                expect(handin.locator(f"#lab-{LAB2[:-6]}")).to_contain_text("version 1")
                handin.screenshot(path=str(HANDIN_SCREENSHOT))
                row = handin.locator(f"#lab-{LAB2[:-6]}")
                row.get_by_role("button", name="Get feedback").click()  # none returned yet
                expect(handin.locator("#handin-note")).to_have_text(
                    f"No feedback on {LAB2[:-6]} yet."
                )
                [kept] = (hub.state_dir / "store/submissions" / LAB2[:-6] / "dora").iterdir()
                assert (kept / LAB2).read_bytes() == (home / LAB2).read_bytes()
            finally:
                browser.close()
