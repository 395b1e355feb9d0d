"""The web app attacked over HTTP: code-running envs, foreign hosts, huge bodies, evictions,
hostile tokens and text, slow and failing opponents; each refused with a clear status and no leak."""

from __future__ import annotations

import http.client
import json
import threading
import time
import warnings

import httpx
import pytest
from fastapi.testclient import TestClient
from people_helpers import LOOPBACK, P4G_DATA, P4G_PERSONAS, ThreadServer

from baselines.apps.people.api_models import ServerSettings
from baselines.apps.people.app import create_app
from baselines.apps.people.commands import check_bind
from baselines.apps.people.play_api import code_running_warning, offered_envs
from baselines.training.records import read_records

P4G_ARGS = {"P4G": {"persona_source": P4G_PERSONAS, "exchanges": 2}}
FAILING = "scripted:people_helpers:FailingPersuadee"
SLOW = "scripted:people_helpers:SlowPersuadee"


def app_client(tmp_path, base_url=LOOPBACK, **changes):
    settings = ServerSettings(save_path=tmp_path / "play.jsonl", env_kwargs=P4G_ARGS, **changes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TestClient(create_app(settings), base_url=base_url), settings


def start(client, **body):
    response = client.post("/api/games", json={"env": "P4G", "side": "agent", **body})
    assert response.status_code == 200, response.text
    data = response.json()
    return data["game"], {"X-Token": data["token"]}


# ---- 1. no shell through the web app ------------------------------------------------------------


def test_an_env_whose_tools_run_code_is_offered_only_when_named_and_never_in_public(tmp_path):
    client, _ = app_client(tmp_path)
    assert "CooperBench" not in client.get("/api/options").json()["envs"]
    refused = client.post("/api/games", json={"env": "CooperBench", "side": "agent"})
    assert refused.status_code == 404
    named = ServerSettings(envs=["CooperBench", "P4G"])
    assert offered_envs(named) == ["CooperBench", "P4G"]
    assert "CooperBench" in code_running_warning(offered_envs(named))
    assert code_running_warning(offered_envs(ServerSettings())) is None
    with pytest.raises(ValueError, match="never offered on a public address"):
        create_app(ServerSettings(envs=["CooperBench"], public=True, access_token="t" * 20))


# ---- 2. Host and Origin ---------------------------------------------------------------------------


def test_a_foreign_host_or_origin_reaches_nothing(tmp_path):
    rebound, _ = app_client(tmp_path, base_url="http://attacker.example:8765")
    assert rebound.get("/api/options").status_code == 421
    assert rebound.post("/api/games", json={"env": "P4G", "side": "agent"}).status_code == 421
    assert rebound.get("/").status_code == 421
    client, _ = app_client(tmp_path)
    assert client.get("/api/options").status_code == 200
    foreign = client.post(
        "/api/games", json={"env": "P4G", "side": "agent"}, headers={"Origin": "http://attacker.example"}
    )
    assert foreign.status_code == 403
    own = client.get("/api/options", headers={"Origin": "http://127.0.0.1:8000"})
    assert own.status_code == 200
    public, _ = app_client(tmp_path, base_url="http://study.example.org", hosts=["study.example.org"])
    assert public.get("/api/options").status_code == 200


# ---- 3. body size cap before parsing, nothing echoed -------------------------------------------


@pytest.fixture
def server(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        running = ThreadServer(
            create_app(ServerSettings(save_path=tmp_path / "play.jsonl", env_kwargs=P4G_ARGS, games_per_minute=500))
        )
    yield running
    running.stop()


def test_an_oversized_body_is_refused_before_it_is_read_and_never_echoed(server):
    marker = b"ECHO-ME-" * 4
    body = b'{"text": "' + marker + b"x" * (8 * 1024 * 1024) + b'"}'
    declared = httpx.post(f"{server.url}/api/games/nosuchgame/say", content=body, timeout=30)
    assert declared.status_code == 413 and marker not in declared.content and len(declared.content) < 200
    # streamed in chunks with no Content-Length: counted as it arrives
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
    try:
        connection.request(
            "POST", "/api/games/nosuchgame/say", body=chunks, headers={"Content-Type": "application/json"}
        )
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed before taking the rest
    response = connection.getresponse()
    assert response.status == 413 and marker not in response.read()
    small = httpx.post(f"{server.url}/api/games/nosuchgame/say", json={"text": "ECHO-ME" + "y" * 5000})
    assert small.status_code == 422 and "ECHO-ME" not in small.text and "text" in small.text


# ---- 6. nobody evicts a game in play; an evicted unfinished game is saved ---------------------------


def test_a_flood_of_new_games_evicts_no_game_in_play(tmp_path):
    client, _ = app_client(tmp_path)
    game, token = start(client)
    assert client.post(f"/api/games/{game}/say", json={"text": "Hello there"}, headers=token).status_code == 200
    statuses = [client.post("/api/games", json={"env": "P4G", "side": "agent"}).status_code for _ in range(300)]
    assert 429 in statuses
    assert client.get(f"/api/games/{game}", headers=token).status_code == 200
    assert client.post(f"/api/games/{game}/say", json={"text": "Still here?"}, headers=token).status_code == 200


def test_only_idle_games_make_room_and_an_unfinished_one_is_saved_first(tmp_path):
    client, settings = app_client(tmp_path, max_games=2, idle_seconds=0.5)
    first, token = start(client)
    client.post(f"/api/games/{first}/say", json={"text": "Hello there"}, headers=token)
    start(client)
    assert client.post("/api/games", json={"env": "P4G", "side": "agent"}).status_code == 429  # both in play
    time.sleep(0.6)
    start(client)  # now the idle first game makes room
    assert client.get(f"/api/games/{first}", headers=token).status_code == 404
    (saved,) = read_records(settings.save_path)
    assert saved.end_reason == "unfinished" and saved.log[0]["message"]["content"] == "Hello there"


# ---- 8. a failing opponent ends the game, with nothing of its error shown ------------------------------


def test_a_failing_opponent_ends_the_game_clearly_instead_of_stranding_it(tmp_path):
    client, settings = app_client(tmp_path, opponents=[FAILING])
    game, token = start(client, opponent=FAILING)
    first = client.post(f"/api/games/{game}/say", json={"text": "Hello"}, headers=token)
    assert first.status_code == 200 and not first.json()["over"]
    ended = client.post(f"/api/games/{game}/say", json={"text": "Would you donate?"}, headers=token)
    assert ended.status_code == 200, ended.text
    state = ended.json()
    assert state["over"] and state["end_reason"] == "opponent_error" and not state["your_turn"]
    assert "SECRET" not in ended.text and "/srv" not in ended.text
    again = client.post(f"/api/games/{game}/say", json={"text": "Hello?"}, headers=token)
    assert again.status_code == 400 and "over" in again.json()["detail"]
    (record,) = read_records(settings.save_path)
    assert record.end_reason == "opponent_error"


# ---- 10. hostile tokens and text, leaks, headers, cookies, starvation ------------------------------------


def test_hostile_tokens_get_403_and_lone_surrogates_get_422(tmp_path):
    client, _ = app_client(tmp_path)
    game, token = start(client)
    for bad in ("é" * 10, "x" * 99):
        response = client.get(f"/api/games/{game}", headers={"X-Token": bad.encode("utf-8")})
        assert response.status_code == 403
    surrogate = client.post(
        f"/api/games/{game}/say",
        content=b'{"text": "hi \\ud800 there"}',
        headers={**token, "Content-Type": "application/json"},
    )
    assert surrogate.status_code == 422
    assert client.get(f"/api/games/{game}", headers=token).json()["log"] == []
    shop, shop_token = start(client, env="Tau2Retail", task_id="0")
    before = client.get(f"/api/games/{shop}", headers=shop_token).json()["log"]
    in_arguments = client.post(
        f"/api/games/{shop}/tool",
        content=b'{"name": "find_user_id_by_email", "arguments": {"email": "a\\udc80@example.com"}}',
        headers={**shop_token, "Content-Type": "application/json"},
    )
    assert in_arguments.status_code == 422 and "surrogate" in in_arguments.text
    assert client.get(f"/api/games/{shop}", headers=shop_token).json()["log"] == before


def test_responses_show_no_server_path_no_raw_spec_and_carry_the_security_headers(tmp_path):
    client, _ = app_client(tmp_path, opponents=["scripted", "hf:/models/secret-run/policy"])
    options = client.get("/api/options")
    assert options.json()["opponents"] == ["scripted", "opponent2"] and "/models" not in options.text
    unknown = client.post("/api/games", json={"env": "P4G", "side": "agent", "task_id": "no-such-dialogue"})
    assert unknown.status_code == 400 and "no-such-dialogue" in unknown.text
    assert (P4G_DATA is None or str(P4G_DATA) not in unknown.text) and "corpus:/" not in unknown.text
    for path in ("/", "/study", "/view", "/api/options", "/static/common.js"):
        headers = client.get(path).headers
        assert "script-src 'self'" in headers["content-security-policy"], path
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"


def test_a_public_server_sets_a_secure_cookie_that_is_not_the_token_and_bounds_tokens():
    secret = "a-long-enough-access-token"
    with pytest.raises(ValueError, match="16 to 200"):
        check_bind("0.0.0.0", True, "t")
    with pytest.raises(ValueError, match="16 to 200"):
        check_bind("0.0.0.0", True, "é" * 20)
    client = TestClient(
        create_app(ServerSettings(access_token=secret, public=True, hosts=["study.example.org"])),
        base_url="https://study.example.org",
    )
    response = client.get(f"/?access={secret}")
    cookie = response.headers["set-cookie"]
    assert response.status_code == 200 and "Secure" in cookie and secret not in cookie
    assert client.get("/api/options").status_code == 200  # the cookie opens the server
    fresh = TestClient(client.app, base_url="https://study.example.org")
    assert fresh.get("/api/options", headers={"X-Access-Token": "x" * 10_000}).status_code == 401
    assert fresh.get("/api/options", headers={"X-Access-Token": "é".encode()}).status_code == 401


def test_games_waiting_on_a_slow_opponent_do_not_slow_the_other_routes(tmp_path):
    from people_helpers import SlowPersuadee

    SlowPersuadee.delay = 6.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = create_app(
            ServerSettings(opponents=[SLOW], env_kwargs=P4G_ARGS, save_path=tmp_path / "p.jsonl", games_per_minute=100)
        )
    server = ThreadServer(app)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            games = [
                client.post("/api/games", json={"env": "P4G", "side": "agent", "opponent": SLOW}) for _ in range(45)
            ]
            assert all(g.status_code == 200 for g in games)

            def say(data):
                with httpx.Client(base_url=server.url, timeout=120) as own:
                    own.post(f"/api/games/{data['game']}/say", json={"text": "hi"}, headers={"X-Token": data["token"]})

            waiting = [threading.Thread(target=say, args=(g.json(),)) for g in games]
            for thread in waiting:
                thread.start()
            time.sleep(2.5)  # every turn is waiting on the opponent by now
            began = time.monotonic()
            assert client.get("/api/options").status_code == 200
            assert client.get("/").status_code == 200
            quick = time.monotonic() - began
            for thread in waiting:
                thread.join()
        assert quick < 1.0, f"GET /api/options took {quick:.1f} s behind slow games"
    finally:
        server.stop()


def test_a_json_body_in_an_error_is_never_echoed(tmp_path):
    client, _ = app_client(tmp_path)
    game, token = start(client)
    response = client.post(
        f"/api/games/{game}/say", json={"text": "ok", "extra": "<script>LEAK</script>"}, headers=token
    )
    assert response.status_code == 422 and "LEAK" not in response.text
    assert json.loads(response.text)["detail"][0]["loc"] == ["body", "extra"]
