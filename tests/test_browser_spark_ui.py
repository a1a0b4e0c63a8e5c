"""The Spark UI whole, behind the hub, in a real browser (issue 13): a student runs a PySpark
cell in JupyterLab, clicks the Spark UI link it shows, and every tab of Spark 4.3's UI (Jobs,
Stages and a stage's task table, Storage, Environment, Executors, SQL / DataFrame and a
query's page) and its logo load with no 404 and no endless "Loading...". Saves the README's
screenshots of the Executors and SQL pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, Response, expect, sync_playwright

from tests.conftest import REPO
from tests.hubproc import ScaleLabUp, running
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

#: A cell that leaves something on every page: jobs and stages, a cached table, a SQL query.
CELL = """\
numbers = spark.range(0, 20000, numPartitions=4).selectExpr('id', 'id % 7 AS k')
numbers.createOrReplaceTempView('numbers')
spark.catalog.cacheTable('numbers')
spark.table('numbers').count()
spark.sql('SELECT k, count(*) AS n FROM numbers GROUP BY k ORDER BY k').collect()[0]"""
NOTEBOOK = {
    "cells": [{"cell_type": "code", "metadata": {}, "source": CELL,
               "outputs": [], "execution_count": None}],
    "metadata": {"kernelspec": {"name": "scalelab-pyspark", "display_name": "PySpark",
                                "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}  # fmt: skip
EXECUTORS_SCREENSHOT = REPO / "docs" / "screenshot-spark-executors.png"
SQL_SCREENSHOT = REPO / "docs" / "screenshot-spark-sql.png"


#: True while an element on screen says "Loading..." (Spark's tables before their data came).
LOADING = """() => [...document.querySelectorAll("body *")].some(
    (e) => e.children.length === 0 && e.textContent.includes("Loading...")
        && e.getClientRects().length > 0)"""


def _settled(page: Page) -> None:
    """The page and its scripts' REST calls are done, and nothing on screen says "Loading..."."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function(f"() => !({LOADING})()", timeout=30_000)


@pytest.mark.browser
def test_every_spark_ui_page_works_behind_the_hub_from_the_link_in_the_cell(tmp_path: Path):
    with running(ScaleLabUp(tmp_path / "state")) as hub:
        hub.start_server("erin")
        body = {"type": "notebook", "format": "json", "content": NOTEBOOK}
        saved = hub.server_api("erin", "PUT", "/contents/spark-ui.ipynb", data=json.dumps(body))
        assert saved.status_code in (200, 201), saved.text
        failures: list[str] = []

        def record(response: Response) -> None:
            if response.status >= 400 and "/sparkui/" in response.url:
                failures.append(f"{response.status} {response.url}")

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                context.on("response", record)
                page = context.new_page()
                page.goto(f"{hub.url}/hub/login")
                page.fill("#username_input", "erin")
                page.fill("#password_input", hub.password)
                page.click("#login_submit")
                page.wait_for_url("**/user/erin/lab**", timeout=240_000)
                page.goto(f"{hub.url}/user/erin/lab/tree/spark-ui.ipynb")
                # Run the cell once its kernel is there (before, JupyterLab runs it nowhere).
                status = page.locator("#jp-main-statusbar")
                expect(status).to_contain_text("PySpark | Idle", timeout=180_000)
                cell = page.locator(".jp-CodeCell").first
                cell.click()
                page.keyboard.press("Shift+Enter")
                link = page.locator(".scalelab-spark-ready a")
                expect(link).to_be_visible(timeout=240_000)
                with context.expect_page() as opened:
                    link.click()
                ui = opened.value
                ui.wait_for_load_state()
                assert "/user/erin/sparkui/" in ui.url and ui.url.endswith("/jobs/"), ui.url
                root = ui.url.removesuffix("jobs/")
                _settled(ui)
                expect(ui.get_by_text("Completed Jobs", exact=False).first).to_be_visible()

                for tab, marker in [
                    ("Stages", "Completed Stages"),
                    ("Storage", "In-memory table numbers"),
                    ("Environment", "spark.ui.proxyBase"),
                    ("Executors", "driver"),
                    ("SQL / DataFrame", "SQL Executions"),
                ]:
                    ui.locator(".navbar-nav a", has_text=tab).first.click()
                    _settled(ui)
                    assert ui.url.startswith(root), (tab, ui.url)
                    # In the page (Environment's tables start folded: attached, not visible).
                    expect(ui.get_by_text(marker, exact=False).first).to_be_attached()
                    if tab == "Executors":
                        table = ui.locator("#active-executors-table")
                        expect(table).to_contain_text("driver", timeout=30_000)
                        ui.screenshot(path=str(EXECUTORS_SCREENSHOT))
                    if tab == "SQL / DataFrame":
                        ui.screenshot(path=str(SQL_SCREENSHOT))

                ui.locator("a[href*='execution/?id=']").first.click()  # a query's own page
                _settled(ui)
                expect(ui.get_by_text("Details for Query", exact=False)).to_be_visible()

                ui.goto(f"{root}stages/")
                ui.locator("a[href*='stages/stage/?id=']").first.click()  # a stage's tasks
                _settled(ui)
                tasks = ui.locator("#active-tasks-table")
                expect(tasks).to_be_visible(timeout=30_000)
                expect(tasks.locator("tbody tr").first).to_be_visible(timeout=30_000)

                ui.locator(".navbar-brand").first.click()  # the logo: the UI's root
                ui.wait_for_load_state()
                assert ui.url == f"{root}jobs/", ui.url
                assert failures == [], failures
            finally:
                browser.close()
