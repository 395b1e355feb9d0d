"""The web app's API (FastAPI TestClient): play, tool calls, studies, and bad inputs that change nothing."""

from __future__ import annotations

import json
import warnings

import pytest
from fastapi.testclient import TestClient
from people_helpers import LOOPBACK, P4G_PERSONAS, VS_OPPONENT, p4g_corpus

from baselines.apps.people.api_models import MAX_TEXT, ServerSettings
from baselines.apps.people.app import create_app
from baselines.apps.people.commands import check_bind
from baselines.apps.people.study import StudyConfig
from baselines.training.records import read_records

P4G_TASKS = ["20180527-123001_539_live", "20180527-210026_713_live"]
P4G_ARGS = {"P4G": {"persona_source": P4G_PERSONAS, "exchanges": 2}}


@pytest.fixture
def client(tmp_path):
    settings = ServerSettings(
        opponents=["scripted", VS_OPPONENT], save_path=tmp_path / "play.jsonl", env_kwargs=P4G_ARGS
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield TestClient(create_app(settings), base_url=LOOPBACK), settings


def new_game(client, **body):
    response = client.post("/api/games", json={"side": "agent", **body})
    assert response.status_code == 200, response.text
    data = response.json()
    return data["game"], {"X-Token": data["token"]}, data["state"]


def test_a_p4g_game_to_the_end_shows_the_reward_breakdown_and_is_saved(client):
    client, settings = client
    game, token, state = new_game(client, env="P4G")
    assert state["your_turn"] and not state["over"]
    while not state["over"]:
        response = client.post(
            f"/api/games/{game}/say", json={"text": "Would you give $1 to Save the Children?"}, headers=token
        )
        assert response.status_code == 200
        state = response.json()
    assert state["end_reason"] and set(state["reward_info"]) == {"agent", "user"}
    assert "components" in state["reward_info"]["agent"]
    (record,) = read_records(settings.save_path)
    assert record.players == {"agent": "human", "user": "scripted"} and record.end_reason == state["end_reason"]
    assert len(record.log) == len(state["log"])


def test_vs_candidates_of_the_opponent_come_with_its_replies(client):
    client, _ = client
    game, token, _ = new_game(client, env="P4G", opponent=VS_OPPONENT)
    state = client.post(f"/api/games/{game}/say", json={"text": "Hello!"}, headers=token).json()
    reply = state["log"][-1]
    assert reply["side"] == "user" and reply["vs"]["candidates"][0] == "No thanks."
    assert reply["message"]["content"] in reply["vs"]["candidates"] and len(reply["vs"]["probabilities"]) == 5


def test_a_tau2_tool_call_is_validated_then_executed(client):
    client, _ = client
    game, token, state = new_game(client, env="Tau2Retail", task_id="0")
    assert any(t["function"]["name"] == "find_user_id_by_email" for t in state["tools"])
    before = len(state["log"])
    bad = client.post(
        f"/api/games/{game}/tool", json={"name": "find_user_id_by_email", "arguments": {"mail": 1}}, headers=token
    )
    assert bad.status_code == 400 and "email" in bad.json()["detail"]
    assert len(client.get(f"/api/games/{game}", headers=token).json()["log"]) == before
    good = client.post(
        f"/api/games/{game}/tool",
        json={"name": "find_user_id_by_email", "arguments": {"email": "nobody@example.com"}},
        headers=token,
    ).json()
    call, result = good["log"][before : before + 2]
    assert call["message"]["tool_calls"][0]["function"]["name"] == "find_user_id_by_email"
    assert result["message"]["role"] == "tool" and good["your_turn"]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("say", {"text": "x" * (MAX_TEXT + 1)}, 422),
        ("say", {"text": ""}, 422),
        ("say", {"text": "hi", "extra": 1}, 422),
        ("tool", {"name": "t", "arguments": {"a": "x" * 9000}}, 422),
        ("tool", {"name": "no_such_tool", "arguments": {}}, 400),
    ],
)
def test_bad_moves_get_a_clear_4xx_and_change_nothing(client, path, body, status):
    client, _ = client
    game, token, state = new_game(client, env="P4G")
    response = client.post(f"/api/games/{game}/{path}", json=body, headers=token)
    assert response.status_code == status and response.json()["detail"]
    assert client.get(f"/api/games/{game}", headers=token).json()["log"] == state["log"]


def test_unknown_env_opponent_game_or_token_are_refused(client):
    client, _ = client
    assert client.post("/api/games", json={"env": "NoSuchEnv", "side": "agent"}).status_code == 404
    refused = client.post("/api/games", json={"env": "P4G", "side": "agent", "opponent": "openai:gpt-5"})
    assert refused.status_code == 400 and "unknown opponent" in refused.json()["detail"]
    assert client.post("/api/games", json={"env": "P4G", "side": "both"}).status_code == 422
    game, token, state = new_game(client, env="P4G")
    wrong = client.post(f"/api/games/{game}/say", json={"text": "hi"}, headers={"X-Token": "not-it"})
    assert wrong.status_code == 403 and wrong.json()["detail"] == "wrong game token"
    assert client.get(f"/api/games/{game}", headers=token).json()["log"] == state["log"]
    assert client.get("/api/games/nope", headers=token).status_code == 404


def study_settings(tmp_path, **changes) -> ServerSettings:
    study = StudyConfig(
        name="pilot",
        env="P4G",
        side="agent",
        env_kwargs={"persona_source": str(p4g_corpus()), "exchanges": 1},  # the dialogues of P4G_TASKS
        conditions=[{"name": "a", "opponent": "scripted"}, {"name": "b", "opponent": VS_OPPONENT}],
        scenarios=P4G_TASKS,
        episodes_per_participant=2,
        participants=["p1", "p2"],
        questionnaire=[{"id": "natural", "question": "How natural?", "scale": [1, 5]}],
    )
    return ServerSettings(study=study, study_db=tmp_path / "study.sqlite", **changes)


def test_a_participant_reaches_only_their_own_study_with_their_token(tmp_path):
    settings = study_settings(tmp_path)
    client = TestClient(create_app(settings), base_url=LOOPBACK)
    tokens = {p["id"]: p["token"] for p in client.app.state.study.store.participants()}
    mine = {"X-Token": tokens["p1"]}
    assert client.get("/api/study/p2", headers=mine).status_code == 403  # p1's token does not open p2
    assert client.post("/api/study/p2/consent", headers=mine).status_code == 403
    assert client.post("/api/study/p1/say", json={"text": "hi"}, headers=mine).status_code == 409  # no consent yet
    view = client.post("/api/study/p1/consent", headers=mine).json()
    assert view["current"]["slot"] == 0 and "p2" not in json.dumps(view)
    assert "scripted" not in json.dumps(view) and "vs" not in json.dumps(view["current"]["state"]["log"])
    early = client.post("/api/study/p1/answers", json={"answers": {"natural": 4}}, headers=mine)
    assert early.status_code == 409
    assert client.post("/api/study/p1/say", json={"text": "y" * (MAX_TEXT + 1)}, headers=mine).status_code == 422
    assert client.app.state.study.store.turns("p1", 0) == []
    while view.get("current"):
        view = client.post("/api/study/p1/say", json={"text": "Please donate."}, headers=mine).json()
    assert client.post("/api/study/p1/answers", json={"answers": {"other": 1}}, headers=mine).status_code == 422
    done = client.post("/api/study/p1/answers", json={"answers": {"natural": 4}}, headers=mine).json()
    assert done["answered"] and all(e["status"] == "done" for e in done["episodes"])
    assert client.app.state.study.store.episodes("p2")[0]["status"] == "assigned"  # untouched


def test_a_study_naming_an_unknown_scenario_is_refused_before_anyone_plays(tmp_path):
    settings = study_settings(tmp_path)
    settings.study.scenarios.append("no-such-task")
    with pytest.raises(ValueError, match="no-such-task"):
        create_app(settings)


def test_public_binding_needs_the_flag_and_a_token_and_then_every_request_does():
    check_bind("127.0.0.1", False, None)
    check_bind("::1", False, None)
    secret = "s3cret-s3cret-s3cret"
    for public, token in ((False, None), (True, None), (False, secret)):
        with pytest.raises(ValueError, match="--public and --token"):
            check_bind("0.0.0.0", public, token)
    check_bind("0.0.0.0", True, secret)
    client = TestClient(create_app(ServerSettings(access_token=secret)), base_url=LOOPBACK)
    assert client.get("/api/options").status_code == 401
    assert client.get("/api/options", headers={"X-Access-Token": secret}).status_code == 200
    assert client.get(f"/?access={secret}").status_code == 200
    assert client.get("/api/options").status_code == 200  # the cookie set by the link


def test_scope_serve_refuses_a_public_address_without_the_flag_and_a_token(capsys, monkeypatch):
    from baselines.cli import main

    monkeypatch.delenv("SCOPE_SERVE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "refusing to bind 0.0.0.0" in capsys.readouterr().err
    assert main(["view", "/nonexistent/run", "--host", "10.0.0.1", "--public"]) == 2
    assert main(["study", "export", "/nonexistent/study.sqlite"]) == 2
    assert "no study database" in capsys.readouterr().err


def test_games_share_their_opponent_instead_of_building_one_each(tmp_path):
    from people_helpers import CountedPersuadee

    spec = "scripted:people_helpers:CountedPersuadee"
    settings = ServerSettings(opponents=[spec], save_path=tmp_path / "play.jsonl", env_kwargs=P4G_ARGS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(settings), base_url=LOOPBACK)
        before = CountedPersuadee.built
        for _ in range(3):
            new_game(client, env="P4G", opponent=spec)
    assert CountedPersuadee.built - before == 1  # a local model is loaded once, not per game
