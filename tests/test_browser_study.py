"""A two-participant study in a real headless Chromium, with the `scope serve` process stopped and
started again in the middle over the same SQLite file: no turn is lost, both resume, and
`scope study export` writes the results table."""

from __future__ import annotations

import csv
import sqlite3

import pytest
import yaml
from people_helpers import free_port, open_browser, p4g_corpus, scope_process, screenshot, wait_for
from selenium.webdriver.common.by import By

from baselines.cli import main

TASKS = ["20180527-123001_539_live", "20180527-210026_713_live"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from open_browser(tmp_path_factory)


@pytest.fixture
def study_file(tmp_path):
    path = tmp_path / "pilot.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "pilot",
                "env": "P4G",
                "side": "agent",
                "env_kwargs": {"persona_source": str(p4g_corpus()), "exchanges": 2},
                "instructions": "Persuade your partner to donate to Save the Children.",
                "consent": "I agree that my messages are stored for research.",
                "conditions": [
                    {"name": "scripted", "opponent": "scripted"},
                    {"name": "verbalized", "opponent": "vs:scripted:people_helpers:VerbalizingPersuadee"},
                ],
                "scenarios": TASKS,
                "episodes_per_participant": 1,
                "participants": ["alice", "bob"],
                "questionnaire": [
                    {"id": "natural", "question": "How natural was your partner (1-5)?", "scale": [1, 5]}
                ],
            }
        )
    )
    return path


def links_of(process, count):
    links = []
    while len(links) < count:
        line = process.stdout.readline()
        assert line, "the server printed no participant links"
        if "/study?participant=" in line:
            links.append(line.strip())
    return dict((link.split("participant=")[1].split("&")[0], link) for link in links)


def stop(process):
    process.terminate()
    process.wait(timeout=20)


def turn_texts(driver):
    return [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#conversation .turn")]


def say(driver, text):
    count = len(turn_texts(driver))
    driver.find_element(By.ID, "message").send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait_for(driver, lambda d: len(turn_texts(d)) > count or not d.find_element(By.ID, "play-box").is_displayed())


def open_as(driver, link, port):
    driver.get(link)
    wait_for(
        driver,
        lambda d: any(
            d.find_element(By.ID, box).is_displayed()
            for box in ("consent-box", "play-box", "questions-box", "thanks-box")
        ),
    )


def test_two_participants_and_a_server_restart_lose_no_turn(study_file, tmp_path, browser):
    db = tmp_path / "pilot.sqlite"
    port = free_port()
    server = scope_process("serve", "--study", str(study_file), "--study-db", str(db), port=port)
    try:
        links = links_of(server, 2)
        played = {}
        for person in ("alice", "bob"):
            open_as(browser, links[person], port)
            assert "Save the Children" in browser.find_element(By.ID, "instructions-text").text
            browser.find_element(By.ID, "consent").click()
            wait_for(browser, lambda d: d.find_element(By.ID, "play-box").is_displayed())
            say(browser, f"Hi, I am {person}. Would you donate?")
            played[person] = turn_texts(browser)
            screenshot(browser, f"study_{person}_before_restart")
        stored_before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM turns").fetchone()[0]
        assert stored_before == sum(len(texts) for texts in played.values())
    finally:
        stop(server)

    server = scope_process("serve", "--study", str(study_file), "--study-db", str(db), port=port)
    try:
        again = links_of(server, 2)
        assert again == links  # the same tokens: participants keep their links
        for person in ("alice", "bob"):
            open_as(browser, links[person], port)
            assert turn_texts(browser) == played[person]  # resumed where it stood
            while browser.find_element(By.ID, "play-box").is_displayed():
                say(browser, "Even a small amount helps children in need.")
            # how the conversation ended, with the whole conversation, before anything else
            wait_for(browser, lambda d: d.find_element(By.ID, "ended-box").is_displayed())
            ending = browser.find_element(By.ID, "ended-reason").text
            assert ending.startswith("The conversation ended:") and len(ending) > len("The conversation ended: .")
            ended_turns = browser.find_elements(By.CSS_SELECTOR, "#ended-conversation .turn")
            assert len(ended_turns) > len(played[person]) and ended_turns[0].text == played[person][0]
            screenshot(browser, f"study_{person}_ended")
            browser.find_element(By.ID, "continue").click()
            wait_for(browser, lambda d: d.find_element(By.ID, "questions-box").is_displayed())
            assert browser.find_element(By.ID, "last").text == ending
            screenshot(browser, f"study_{person}_questionnaire")
            browser.find_element(By.NAME, "natural").send_keys("4")
            browser.find_element(By.ID, "submit-answers").click()
            wait_for(browser, lambda d: d.find_element(By.ID, "thanks-box").is_displayed())
        # another participant's token opens nothing
        alice_token = links["alice"].split("token=")[1]
        browser.get(links["bob"].split("token=")[0] + "token=" + alice_token)
        wait_for(browser, lambda d: "wrong token" in d.find_element(By.ID, "fatal").text)
    finally:
        stop(server)

    out = tmp_path / "results.csv"
    assert main(["study", "export", str(db), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["participant"] for r in rows) == ["alice", "bob"]
    assert all(r["status"] == "done" and r["end_reason"] and '"natural": 4' in r["answers"] for r in rows)
    assert {r["condition"] for r in rows} == {"scripted", "verbalized"}  # balanced assignment
    summary = list(csv.DictReader(out.with_suffix(".summary.csv").open()))
    assert [s["condition"] for s in summary] == ["scripted", "verbalized"]
    conn = sqlite3.connect(db)
    for person in ("alice", "bob"):
        stored = [
            row[0]
            for row in conn.execute("SELECT message FROM turns WHERE participant = ? ORDER BY position", (person,))
        ]
        assert len(stored) > len(played[person])  # every turn before and after the restart
