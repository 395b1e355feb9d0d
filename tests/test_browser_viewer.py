"""`scope view RUN_DIR` in a real headless Chromium, on the episodes a real training run saved:
the conversation with roles and VS candidates, rewards, filters, and early vs late steps side by side."""

from __future__ import annotations

import pytest
from people_helpers import free_port, open_browser, scope_process, screenshot, train_tiny_run, wait_for
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from open_browser(tmp_path_factory)


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    run = train_tiny_run(tmp_path_factory)
    port = free_port()
    process = scope_process("view", str(run), port=port)
    printed = ""
    while "serving on" not in printed:
        printed = process.stdout.readline()
        assert printed, "scope view printed no address"
    process.url = printed.split("serving on ")[1].strip()  # the address it tells people to open
    yield process
    process.terminate()
    process.wait(timeout=20)


def rows(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#episodes tr.row")


def test_the_viewer_shows_a_saved_run(viewer, browser):
    browser.get(viewer.url)  # the page `scope view` printed shows the run
    wait_for(browser, lambda d: len(rows(d)) == 6)
    rows(browser)[0].click()
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#conversation .turn"))
    sides = [t.get_attribute("data-side") for t in browser.find_elements(By.CSS_SELECTOR, "#conversation .turn")]
    assert sides[:2] == ["agent", "user"]
    meta = browser.find_element(By.ID, "meta").text
    assert (
        "step 1" in meta and "simulator: vs5:scripted:people_helpers:VerbalizingPersuadee" in meta and "ended: " in meta
    )
    assert browser.find_element(By.CSS_SELECTOR, ".rewards tr[data-side=agent]").text.startswith("agent")
    candidates = browser.find_element(By.CSS_SELECTOR, ".turn.user ol.vs")
    assert candidates.is_displayed() and "No thanks." in candidates.text
    screenshot(browser, "view_episode")

    Select(browser.find_element(By.ID, "f-step")).select_by_visible_text("2")
    browser.find_element(By.CSS_SELECTOR, "#filters button").click()
    wait_for(browser, lambda d: len(rows(d)) == 3)
    assert all(r.find_elements(By.TAG_NAME, "td")[1].text == "2" for r in rows(browser))

    browser.find_element(By.ID, "compare").click()
    early = wait_for(browser, lambda d: d.find_element(By.ID, "compare-early"))
    late = browser.find_element(By.ID, "compare-late")
    assert early.find_element(By.TAG_NAME, "h3").text == "early: step 1"
    assert late.find_element(By.TAG_NAME, "h3").text == "late: step 2"
    assert early.find_elements(By.CSS_SELECTOR, ".turn") and late.find_elements(By.CSS_SELECTOR, ".turn")
    screenshot(browser, "view_compare")
