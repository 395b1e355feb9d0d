"""The play API: a person starts a game against one of the server's opponents and plays it.

Each game has its own secret token (sent as `X-Token`); games live in memory, at most
`settings.max_games`. A new game makes room only by dropping a finished game or one left idle
for `settings.idle_seconds` (an unfinished one is saved first, `end_reason` "unfinished"); when
every game is in play the new one is refused (429), as is a client address starting more than
`settings.games_per_minute`. So nobody can push a game in play out of memory. A finished game is
appended to the server's `save_path` as an episode record.

Turns run in `moves`, a bounded pool of threads, awaited by async routes: a slow opponent holds a
thread of that pool and nothing else, so the pages, the options and the state of other games stay
quick.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Request

from baselines.apps.people.api_models import TOKEN_HEADER_LENGTH, NewGame, Say, ServerSettings, ToolUse
from baselines.apps.people.game import GameSettings, HumanGame, InvalidMove
from baselines.apps.people.guard import redact, same_secret
from baselines.training.records import append_records
from scope_envs.core.registration import REGISTERED, find_env


def offered_envs(settings: ServerSettings) -> list[str]:
    """The envs players may choose: those named by the operator, else every registered env whose
    tools run no code. A code-running env is refused on a public server."""
    if settings.envs is None:
        return [name for name, info in REGISTERED.items() if not info.runs_code]
    envs = [find_env(name).name for name in settings.envs]
    running = [name for name in envs if find_env(name).runs_code]
    if running and settings.public:
        raise ValueError(f"{', '.join(running)} runs code its players write; it is never offered on a public address")
    return envs


def code_running_warning(envs: list[str]) -> str | None:
    running = [name for name in envs if find_env(name).runs_code]
    if not running:
        return None
    return (
        f"warning: {', '.join(running)} lets every player run commands through its tools; "
        "anyone who reaches this server can run them"
    )


@dataclass
class LiveGame:
    token: str
    game: HumanGame
    lock: threading.Lock = field(default_factory=threading.Lock)
    saved: bool = False
    touched: float = field(default_factory=time.monotonic)
    state: dict[str, Any] = field(default_factory=dict)  # as of its last turn, read without its lock


class RateLimit:
    """At most `per_minute` events per key in any 60 seconds."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.events: dict[str, collections.deque[float]] = {}
        self.lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self.lock:
            if len(self.events) > 10_000:  # forget quiet addresses
                self.events = {k: q for k, q in self.events.items() if q and now - q[-1] < 60}
            recent = self.events.setdefault(key, collections.deque())
            while recent and now - recent[0] >= 60:
                recent.popleft()
            if len(recent) >= self.per_minute:
                return False
            recent.append(now)
            return True


def play_router(settings: ServerSettings, moves: ThreadPoolExecutor) -> APIRouter:
    router = APIRouter(prefix="/api")
    envs = offered_envs(settings)
    games: OrderedDict[str, LiveGame] = OrderedDict()
    games_lock = threading.Lock()
    # one opponent per (env, side, spec, env settings), shared by its games: policies keep no
    # conversation state, and a local model must not be loaded again for every game
    opponents: dict[tuple[str, str, str, str], Any] = {}
    save_lock = threading.Lock()  # games end in parallel; their lines go to one file
    starts = RateLimit(settings.games_per_minute)

    def save(entry: LiveGame) -> None:
        if entry.saved or settings.save_path is None:
            return
        with save_lock:
            append_records(settings.save_path, [entry.game.record()])
        entry.saved = True

    def make_room() -> None:
        """Drops finished games, then games idle too long (saved first); 429 if none may go."""
        now = time.monotonic()
        while len(games) >= settings.max_games:
            victim = next((k for k, e in games.items() if e.game.over), None) or next(
                (k for k, e in games.items() if now - e.touched > settings.idle_seconds and not e.lock.locked()), None
            )
            if victim is None:
                raise HTTPException(429, "every game slot is in play; try again in a few minutes")
            entry = games.pop(victim)
            with entry.lock:
                save(entry)
                entry.game.close()

    async def run(function: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(moves, function)

    @router.get("/options")
    async def options() -> dict[str, Any]:
        return {"envs": envs, "opponents": list(settings.opponents), "sides": ["agent", "user"]}

    def start(request: NewGame) -> tuple[HumanGame, dict[str, Any]]:
        spec = settings.opponents[request.opponent]
        env_kwargs = settings.env_kwargs.get(find_env(request.env).name, {})
        game_settings = GameSettings(
            request.env,
            request.side,
            spec,
            request.seed,
            request.task_id or None,
            env_kwargs=env_kwargs,
            label=request.opponent,
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                key = (request.env, request.side, spec, repr(sorted(env_kwargs.items())))
                game = HumanGame(game_settings, opponent=opponents.get(key))
                opponents.setdefault(key, game.opponent.simulator)
                return game, game.start()
        except ValueError as error:
            raise HTTPException(400, redact(str(error))) from error

    @router.post("/games")
    async def new_game(body: NewGame, request: Request) -> dict[str, Any]:
        if body.env not in envs:
            raise HTTPException(404, f"unknown env {body.env!r}; this server offers {', '.join(envs)}")
        if body.opponent not in settings.opponents:
            raise HTTPException(400, f"unknown opponent {body.opponent!r}; choose one of {list(settings.opponents)}")
        if not starts.allow(request.client.host if request.client else ""):
            raise HTTPException(429, "too many new games from your address; try again in a minute")
        with games_lock:
            make_room()
        game, state = await run(lambda: start(body))
        game_id, token = secrets.token_urlsafe(9), secrets.token_urlsafe(16)
        with games_lock:
            try:
                make_room()
            except HTTPException:
                game.close()
                raise
            games[game_id] = LiveGame(token, game, state=state)
        return {"game": game_id, "token": token, "state": state}

    def live(game_id: str, token: str) -> LiveGame:
        found = games.get(game_id)
        if found is None:
            raise HTTPException(404, "no such game (it may have expired)")
        if not same_secret(token, found.token):
            raise HTTPException(403, "wrong game token")
        return found

    def play_move(entry: LiveGame, move: Callable[[HumanGame], dict[str, Any]]) -> dict[str, Any]:
        with entry.lock:
            entry.touched = time.monotonic()
            try:
                state = move(entry.game)
            except InvalidMove as error:
                raise HTTPException(400, redact(str(error))) from error
            entry.state = state
            if entry.game.over:
                save(entry)
        return state

    @router.get("/games/{game_id}")
    async def game_state(
        game_id: str, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        return live(game_id, x_token).state

    @router.post("/games/{game_id}/say")
    async def game_say(
        game_id: str, body: Say, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        entry = live(game_id, x_token)
        return await run(lambda: play_move(entry, lambda game: game.say(body.text)))

    @router.post("/games/{game_id}/tool")
    async def game_tool(
        game_id: str, body: ToolUse, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        entry = live(game_id, x_token)
        return await run(lambda: play_move(entry, lambda game: game.call_tool(body.name, body.arguments)))

    return router
