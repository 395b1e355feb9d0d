"""A study's database under stress: two servers on one file, a full disk, answers checked and
stored once, a failing opponent, a restart, a study file changed under a database."""

from __future__ import annotations

import logging
import sqlite3
import threading
import warnings

import pytest
from fastapi.testclient import TestClient
from people_helpers import LOOPBACK, p4g_corpus

from baselines.apps.people.api_models import ServerSettings
from baselines.apps.people.app import create_app
from baselines.apps.people.game import GameSettings, HumanGame
from baselines.apps.people.storage import StudyStore
from baselines.apps.people.study import StudyConfig

TASKS = ["20180527-123001_539_live", "20180527-210026_713_live"]


def study(**changes) -> StudyConfig:
    config = {
        "name": "pilot",
        "env": "P4G",
        "side": "agent",
        "env_kwargs": {"persona_source": str(p4g_corpus()), "exchanges": 3},
        "conditions": [{"name": "a", "opponent": "scripted"}],
        "scenarios": TASKS,
        "episodes_per_participant": 2,
        "participants": ["p1", "p2"],
        "questionnaire": [
            {"id": "natural", "question": "How natural?", "scale": [1, 5]},
            {"id": "comments", "question": "Anything else?"},
        ],
    }
    return StudyConfig.model_validate({**config, **changes})


def server(tmp_path, config=None):
    settings = ServerSettings(study=config or study(), study_db=tmp_path / "study.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(settings), base_url=LOOPBACK)
    tokens = {p["id"]: p["token"] for p in client.app.state.study.store.participants()}
    return client, tokens


def say(client, token, pid, text):
    return client.post(f"/api/study/{pid}/say", json={"text": text}, headers={"X-Token": token})


def stored_texts(db, pid, slot=0):
    rows = sqlite3.connect(db).execute(
        "SELECT message FROM turns WHERE participant = ? AND slot = ? ORDER BY position", (pid, slot)
    )
    import json

    return [json.loads(row[0]) for row in rows]


def test_two_servers_on_one_database_neither_lose_nor_mix_turns(tmp_path):
    one, tokens = server(tmp_path)
    two, _ = server(tmp_path)
    token = tokens["p1"]
    one.post("/api/study/p1/consent", headers={"X-Token": token})
    assert say(one, token, "p1", "first, on server one").status_code == 200
    assert say(two, token, "p1", "second, on server two").status_code == 200
    third = say(one, token, "p1", "third, on server one again")  # server one's game is stale: rebuilt
    assert third.status_code == 200
    entries = stored_texts(tmp_path / "study.sqlite", "p1")
    mine = [e["message"]["content"] for e in entries if e["side"] == "agent"]
    assert mine == ["first, on server one", "second, on server two", "third, on server one again"]
    # the stored transcript is one conversation: it replays into a fresh env, every turn fitting
    config = study()
    game = HumanGame(GameSettings("P4G", "agent", "scripted", 0, TASKS[0], env_kwargs=config.env_kwargs), opponent=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        game.replay(entries)
    assert [e["message"]["content"] for e in game.state()["log"]] == [e["message"]["content"] for e in entries]
    view = third.json()
    shown = view["current"]["state"]["log"] if view["current"]["slot"] == 0 else view["last"]["log"]
    assert shown == [{"side": e["side"], "message": e["message"]} for e in entries]


def test_two_servers_taking_turns_at_once_store_each_accepted_turn_exactly_once(tmp_path):
    one, tokens = server(tmp_path)
    two, _ = server(tmp_path)
    token = tokens["p1"]
    one.post("/api/study/p1/consent", headers={"X-Token": token})
    accepted, lock = [], threading.Lock()

    def play(client, name):
        for i in range(3):
            text = f"{name} turn {i}"
            response = say(client, token, "p1", text)
            assert response.status_code in {200, 400, 409}, response.text
            if response.status_code == 200:
                with lock:
                    accepted.append(text)

    threads = [threading.Thread(target=play, args=(c, n)) for c, n in ((one, "one"), (two, "two"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = [
        e["message"]["content"]
        for slot in (0, 1)
        for e in stored_texts(tmp_path / "study.sqlite", "p1", slot)
        if e["side"] == "agent"
    ]
    assert sorted(stored) == sorted(accepted) and len(set(stored)) == len(stored)


def test_a_turn_that_cannot_be_stored_is_not_shown_and_the_real_error_is_logged(tmp_path, caplog):
    client, tokens = server(tmp_path)
    token = {"X-Token": tokens["p1"]}
    client.post("/api/study/p1/consent", headers=token)
    assert say(client, tokens["p1"], "p1", "stored fine").status_code == 200
    store = client.app.state.study.store
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
    with caplog.at_level(logging.ERROR):
        full = say(client, tokens["p1"], "p1", "x" * 3900)
    assert full.status_code == 503 and "not taken" in full.json()["detail"]
    assert "database or disk is full" in caplog.text and "cannot rollback" not in caplog.text
    shown = client.get("/api/study/p1", headers=token).json()["current"]["state"]["log"]
    assert [e["message"]["content"] for e in shown if e["side"] == "agent"] == ["stored fine"]
    store._db.execute("PRAGMA max_page_count = 1073741823")
    assert say(client, tokens["p1"], "p1", "after the disk was freed").status_code == 200


def test_the_store_reports_sqlite_errors_as_they_are(tmp_path):
    store = StudyStore(tmp_path / "s.sqlite")
    store.enrol("p1", lambda position: [("a", "t", 0)])
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    entry = {"side": "agent", "message": {"role": "assistant", "content": "y" * 20000}}
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.add_turns("p1", 0, 0, [entry] * 5)


def finish_episodes(client, token, pid):
    view = client.post(f"/api/study/{pid}/consent", headers={"X-Token": token}).json()
    while view.get("current"):
        response = say(client, token, pid, "Please donate to Save the Children.")
        assert response.status_code == 200, response.text
        view = response.json()
    return view


@pytest.mark.parametrize(
    "answers",
    [
        {"natural": 999, "comments": ""},
        {"natural": "banana", "comments": ""},
        {"natural": {}, "comments": ""},
        {"natural": True, "comments": ""},
        {"natural": 3, "comments": 7},
        {"natural": 3},
        {},
    ],
)
def test_answers_off_their_question_are_refused(tmp_path, answers):
    client, tokens = server(tmp_path)
    finish_episodes(client, tokens["p1"], "p1")
    response = client.post("/api/study/p1/answers", json={"answers": answers}, headers={"X-Token": tokens["p1"]})
    assert response.status_code == 422, response.text
    assert client.app.state.study.store.participant("p1")["finished_at"] is None


def test_answers_are_stored_once(tmp_path):
    client, tokens = server(tmp_path)
    finish_episodes(client, tokens["p1"], "p1")
    token = {"X-Token": tokens["p1"]}
    first = client.post("/api/study/p1/answers", json={"answers": {"natural": 4, "comments": "ok"}}, headers=token)
    assert first.status_code == 200 and first.json()["answered"]
    again = client.post("/api/study/p1/answers", json={"answers": {"natural": 1, "comments": "no"}}, headers=token)
    assert again.status_code == 409
    assert client.app.state.study.store.participant("p1")["answers"] == {"natural": 4, "comments": "ok"}


def test_a_failing_opponent_ends_the_episode_and_a_restart_asks_it_nothing_again(tmp_path):
    from people_helpers import CountingPersuadee, FailingPersuadee

    config = study(
        conditions=[{"name": "flaky", "opponent": "scripted:people_helpers:FailingPersuadee"}],
        participants=["p1"],
    )
    client, tokens = server(tmp_path, config)
    token = tokens["p1"]
    client.post("/api/study/p1/consent", headers={"X-Token": token})
    assert say(client, token, "p1", "Hello").status_code == 200
    failed = say(client, token, "p1", "Would you donate?")
    assert failed.status_code == 200, failed.text
    view = failed.json()
    assert view["episodes"][0]["status"] == "done" and view["last"]["end_reason"] == "opponent_error"
    assert view["current"]["slot"] == 1 and "SECRET" not in failed.text
    calls = FailingPersuadee.calls
    again, _ = server(tmp_path, config)  # a restart over the same database
    view = again.get("/api/study/p1", headers={"X-Token": token}).json()
    assert view["current"]["slot"] == 1 and view["current"]["state"]["your_turn"]
    assert FailingPersuadee.calls == calls  # stored turns are replayed, the opponent is not asked
    # and a replay of a conversation in progress asks its opponent nothing either
    counted = study(conditions=[{"name": "c", "opponent": "scripted:people_helpers:CountingPersuadee"}])
    client, tokens = server(tmp_path / "counted", counted)
    client.post("/api/study/p1/consent", headers={"X-Token": tokens["p1"]})
    say(client, tokens["p1"], "p1", "Hello")
    before = CountingPersuadee.calls
    restarted, _ = server(tmp_path / "counted", counted)
    restarted.get("/api/study/p1", headers={"X-Token": tokens["p1"]})
    assert CountingPersuadee.calls == before


def test_a_study_file_that_lost_a_condition_of_its_database_is_refused_at_startup(tmp_path):
    server(tmp_path)
    renamed = study(conditions=[{"name": "renamed", "opponent": "scripted"}])
    with pytest.raises(ValueError, match=r"conditions \['a'\].*no longer has"):
        server(tmp_path, renamed)


def test_a_participant_token_that_is_not_ascii_gets_403(tmp_path):
    client, _ = server(tmp_path)
    response = client.get("/api/study/p1", headers={"X-Token": "jeton-é".encode()})
    assert response.status_code == 403
