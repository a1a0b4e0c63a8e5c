"""The Spark UI whole, behind the hub, in a real browser (issue 13): a student runs a PySpark
cell in JupyterLab, clicks the Spark UI link it shows, and every tab of Spark 4.3's UI (Jobs,
Stages and a stage's task table, Storage, Environment, Executors, SQL / DataFrame and a
query's page) and its logo load with no 404 and no endless "Loading...". JupyterLab's
"Course > Spark UI..." opens the running kernel's UI on its Jobs page, and after spark.stop()
says that no kernel runs Spark. A collect over spark.driver.maxResultSize shows ScaleLab's
explanation above the folded trace. Saves the students' guide's screenshots of the Executors and
SQL pages
and of that explained failure."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Locator, Page, Response, expect, sync_playwright

from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO
from tests.support.hubproc import ScaleLabUp, running

#: A cell that leaves something on every page: jobs and stages, a cached table, a SQL query.
CELL = """\
numbers = spark.range(0, 20000, numPartitions=4).selectExpr('id', 'id % 7 AS k')
numbers.createOrReplaceTempView('numbers')
spark.catalog.cacheTable('numbers')
spark.table('numbers').count()
spark.sql('SELECT k, count(*) AS n FROM numbers GROUP BY k ORDER BY k').collect()[0]"""
#: A session of the student's own with a small result limit, and a collect over it: a Spark
#: failure that ScaleLab explains, cheaply (seconds, the driver stays up).
LIMIT_CELL = """\
from pyspark.sql import SparkSession
spark = SparkSession.builder.config('spark.driver.maxResultSize', '1m').getOrCreate()"""
COLLECT_CELL = """\
rows = spark.range(0, 2_000_000, numPartitions=1).selectExpr('id', "repeat('x', 20)").collect()"""
NOTEBOOK = {
    "cells": [{"cell_type": "code", "metadata": {}, "source": source,
               "outputs": [], "execution_count": None}
              for source in [CELL, "spark.stop()", LIMIT_CELL, COLLECT_CELL]],
    "metadata": {"kernelspec": {"name": "scalelab-pyspark", "display_name": "PySpark",
                                "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}  # fmt: skip
EXECUTORS_SCREENSHOT = REPO / "docs" / "screenshot-spark-executors.png"
SQL_SCREENSHOT = REPO / "docs" / "screenshot-spark-sql.png"
EXPLANATION_SCREENSHOT = REPO / "docs" / "screenshot-spark-explanation.png"


#: True while an element on screen says "Loading..." (Spark's tables before their data came).
LOADING = """() => [...document.querySelectorAll("body *")].some(
    (e) => e.children.length === 0 && e.textContent.includes("Loading...")
        && e.getClientRects().length > 0)"""


def _settled(page: Page) -> None:
    """The page and its scripts' REST calls are done, and nothing on screen says "Loading..."."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function(f"() => !({LOADING})()", timeout=30_000)


def _run_cell(lab: Page, index: int) -> Locator:
    """Run the notebook's cell ``index`` (from 0) in JupyterLab and wait until it ran."""
    cell = lab.locator(".jp-CodeCell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    lab.keyboard.press("Control+Enter")  # run it, and stay (no new cell below the last)
    prompt = cell.locator(".jp-InputArea-prompt")
    expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=240_000)
    return cell


def _open_spark_ui_from_the_menu(lab: Page) -> Page:
    """Click "Course > Spark UI..." in JupyterLab; the tab it opens, loaded."""
    lab.locator(".lm-MenuBar-itemLabel", has_text="Course").click()
    with lab.context.expect_page() as opened:
        lab.locator(".lm-Menu-itemLabel", has_text="Spark UI").click()
    page = opened.value
    page.wait_for_load_state()
    return page


def test_every_spark_ui_page_works_behind_the_hub_from_the_link_in_the_cell(tmp_path: Path):
    with running(ScaleLabUp(tmp_path / "state", warm_spark=True)) as hub:
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

                # JupyterLab's Course > Spark UI...: the running kernel's UI, its Jobs page.
                menu_ui = _open_spark_ui_from_the_menu(page)
                assert menu_ui.url == f"{root}jobs/", menu_ui.url
                _settled(menu_ui)
                expect(menu_ui.get_by_text("Completed Jobs", exact=False).first).to_be_visible()
                menu_ui.close()

                # After spark.stop(), no kernel runs Spark: one line says so.
                _run_cell(page, 1)
                none = _open_spark_ui_from_the_menu(page)
                assert none.url.endswith("/user/erin/scalelab/sparkui"), none.url
                expect(none.locator("#no-spark-ui")).to_contain_text(
                    "No kernel of yours runs Spark now"
                )
                none.close()

                # A Spark failure: ScaleLab's explanation first, one short error line, then the
                # Python and Java traces folded in one block (issue 34, Must 6).
                _run_cell(page, 2)
                failed = _run_cell(page, 3)
                outputs = failed.locator(".jp-OutputArea-output")
                explanation = outputs.filter(has_text="Setting to change: spark.driver.maxRes")
                folded = outputs.locator("details.scalelab-trace")
                expect(explanation).to_have_count(1)
                expect(folded).to_have_count(1)
                expect(outputs).to_have_count(3)  # the explanation, the error's line, the block
                expect(outputs.nth(0)).to_contain_text("Setting to change")
                expect(outputs.nth(1)).to_contain_text("Py4JJavaError")
                expect(folded.locator("summary")).to_contain_text("click to unfold")
                expect(folded.locator("pre")).to_be_hidden()  # folded until opened
                above = explanation.bounding_box()
                below = folded.bounding_box()
                assert above is not None and below is not None
                assert above["y"] + above["height"] <= below["y"], (above, below)
                page.keyboard.press("Escape")
                page.keyboard.press("Control+b")  # the file browser folded: room for the cell
                expect(page.locator("#filebrowser")).to_be_hidden()
                limit_cell = page.locator(".jp-CodeCell").nth(2)
                limit_cell.evaluate("(cell) => cell.scrollIntoView({block: 'start'})")
                end = folded.bounding_box()
                assert end is not None
                clip = {"x": 0, "y": 0, "width": 1280, "height": end["y"] + end["height"] + 8}
                page.screenshot(path=str(EXPLANATION_SCREENSHOT), clip=clip)
                # Unfolded on a click: the traces, their Java frames folded.
                folded.locator("summary").click()
                expect(folded.locator("pre")).to_be_visible()
                expect(folded.locator("pre")).to_contain_text("Traceback (most recent call last)")
                expect(folded.locator("pre")).to_contain_text("more Java frames left out")
                assert failures == [], failures
            finally:
                browser.close()
