"""The play page in a real headless Chromium: a P4G episode to the end, a tau2 tool call through
its form, the opponent's VS candidates on request. Screenshots are kept as test artifacts."""

from __future__ import annotations

import warnings

import pytest
from people_helpers import P4G_PERSONAS, VS_OPPONENT, ThreadServer, open_browser, screenshot, wait_for
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from baselines.apps.people.api_models import ServerSettings
from baselines.apps.people.app import create_app


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from open_browser(tmp_path_factory)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = ServerSettings(
        opponents=["scripted", VS_OPPONENT],
        save_path=tmp_path_factory.mktemp("play") / "play.jsonl",
        env_kwargs={"P4G": {"persona_source": P4G_PERSONAS, "exchanges": 2}},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        running = ThreadServer(create_app(settings))
    yield running
    running.stop()


def start_game(driver, url, env, side="agent", opponent="scripted", task=""):
    driver.get(url + "/")
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#env option")) > 1)
    Select(driver.find_element(By.ID, "env")).select_by_visible_text(env)
    Select(driver.find_element(By.ID, "side")).select_by_visible_text(side)
    Select(driver.find_element(By.ID, "opponent")).select_by_visible_text(opponent)
    driver.find_element(By.ID, "task").send_keys(task)
    driver.find_element(By.ID, "start").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "title").text.startswith(env))


def turns(driver, side=None):
    selector = "#conversation .turn" + (f"[data-side={side}]" if side else "")
    return driver.find_elements(By.CSS_SELECTOR, selector)


def send(driver, text):
    count = len(turns(driver))
    driver.find_element(By.ID, "message").send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait_for(driver, lambda d: len(turns(d)) > count or d.find_element(By.ID, "error").text)


def test_play_a_p4g_episode_to_the_end_and_see_the_reward(server, browser):
    start_game(browser, server.url, "P4G")
    while not browser.find_elements(By.ID, "end-reason"):
        send(browser, "Would you give a dollar to Save the Children?")
    assert browser.find_element(By.ID, "end-reason").text.startswith("ended: ")
    agent_row = browser.find_element(By.CSS_SELECTOR, ".rewards tr[data-side=agent]")
    assert "donation" in agent_row.text and agent_row.find_element(By.CLASS_NAME, "reward").text
    assert len(turns(browser, "agent")) == 2 and len(turns(browser, "user")) == 2
    screenshot(browser, "play_p4g_end")


def test_make_a_tau2_tool_call_through_its_form(server, browser):
    start_game(browser, server.url, "Tau2Retail", task="0")
    form = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "form[data-tool=find_user_id_by_email]"))
    form.find_element(By.NAME, "email").send_keys("nobody@example.com")
    form.find_element(By.TAG_NAME, "button").click()
    result = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#conversation .turn.tool"))
    assert "find_user_id_by_email" in result.text.lower() and result.find_element(By.CLASS_NAME, "tool-result").text
    calls = browser.find_elements(By.CSS_SELECTOR, "#conversation .tool-call")
    assert calls[-1].text == 'find_user_id_by_email({"email": "nobody@example.com"})'
    screenshot(browser, "play_tau2_tool_call")
    form = browser.find_element(By.CSS_SELECTOR, "form[data-tool=get_order_details]")
    form.find_element(By.TAG_NAME, "button").click()  # a required argument left empty: refused, nothing sent
    wait_for(browser, lambda d: "order_id" in d.find_element(By.ID, "error").text)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#conversation .tool-call")) == len(calls)


def test_the_opponents_vs_candidates_show_on_request(server, browser):
    start_game(browser, server.url, "P4G", opponent=VS_OPPONENT)
    send(browser, "Hello there!")
    candidates = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".turn.user ol.vs"))
    assert not candidates.is_displayed()
    browser.find_element(By.ID, "show-vs").click()
    shown = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".turn.user ol.vs"))
    assert shown.is_displayed() and "0.30 No thanks." in shown.text
    screenshot(browser, "play_vs_candidates")
