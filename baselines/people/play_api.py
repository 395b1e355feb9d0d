"""The play API: a person starts a game against one of the server's opponents and plays it.

Each game has its own secret token (sent as `X-Token`); games live in memory, the newest
`MAX_GAMES`. A finished game is appended to the server's `save_path` as an episode record.
"""

from __future__ import annotations

import secrets
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Header, HTTPException

from baselines.people.api_models import TOKEN_HEADER_LENGTH, NewGame, Say, ServerSettings, ToolUse
from baselines.people.game import GameSettings, HumanGame, InvalidMove
from baselines.people.records import append_records
from scope_envs.core.registration import REGISTERED, find_env

MAX_GAMES = 256


@dataclass
class LiveGame:
    token: str
    game: HumanGame
    lock: threading.Lock = field(default_factory=threading.Lock)
    saved: bool = False


def play_router(settings: ServerSettings) -> APIRouter:
    router = APIRouter(prefix="/api")
    games: OrderedDict[str, LiveGame] = OrderedDict()
    games_lock = threading.Lock()
    # one opponent per (env, side, spec, env settings), shared by its games: policies keep no
    # conversation state, and a local model must not be loaded again for every game
    opponents: dict[tuple[str, str, str, str], Any] = {}
    save_lock = threading.Lock()  # games end in parallel; their lines go to one file

    def offered_envs() -> list[str]:
        return settings.envs if settings.envs is not None else list(REGISTERED)

    @router.get("/options")
    def options() -> dict[str, Any]:
        return {"envs": offered_envs(), "opponents": settings.opponents, "sides": ["agent", "user"]}

    @router.post("/games")
    def new_game(request: NewGame) -> dict[str, Any]:
        if request.env not in offered_envs():
            raise HTTPException(404, f"unknown env {request.env!r}; this server offers {', '.join(offered_envs())}")
        if request.opponent not in settings.opponents:
            raise HTTPException(400, f"unknown opponent {request.opponent!r}; choose one of {settings.opponents}")
        env_kwargs = settings.env_kwargs.get(find_env(request.env).name, {})
        game_settings = GameSettings(
            request.env, request.side, request.opponent, request.seed, request.task_id or None, env_kwargs=env_kwargs
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                key = (request.env, request.side, request.opponent, repr(sorted(env_kwargs.items())))
                game = HumanGame(game_settings, opponent=opponents.get(key))
                opponents.setdefault(key, game.opponent.simulator)
                state = game.start()
        except ValueError as error:
            raise HTTPException(400, str(error)) from error
        game_id, token = secrets.token_urlsafe(9), secrets.token_urlsafe(16)
        with games_lock:
            games[game_id] = LiveGame(token, game)
            while len(games) > MAX_GAMES:
                games.popitem(last=False)[1].game.close()
        return {"game": game_id, "token": token, "state": state}

    def live(game_id: str, token: str) -> LiveGame:
        found = games.get(game_id)
        if found is None:
            raise HTTPException(404, "no such game (it may have expired)")
        if not secrets.compare_digest(found.token, token):
            raise HTTPException(403, "wrong game token")
        return found

    def play_move(game_id: str, token: str, move: Callable[[HumanGame], dict[str, Any]]) -> dict[str, Any]:
        entry = live(game_id, token)
        with entry.lock:
            try:
                state = move(entry.game)
            except InvalidMove as error:
                raise HTTPException(400, str(error)) from error
            if entry.game.over and not entry.saved and settings.save_path is not None:
                with save_lock:
                    append_records(settings.save_path, [entry.game.record()])
                entry.saved = True
        return state

    @router.get("/games/{game_id}")
    def game_state(game_id: str, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)) -> dict[str, Any]:
        entry = live(game_id, x_token)
        with entry.lock:
            return entry.game.state()

    @router.post("/games/{game_id}/say")
    def game_say(
        game_id: str, body: Say, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        return play_move(game_id, x_token, lambda game: game.say(body.text))

    @router.post("/games/{game_id}/tool")
    def game_tool(
        game_id: str, body: ToolUse, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        return play_move(game_id, x_token, lambda game: game.call_tool(body.name, body.arguments))

    return router
