"""The study API: a participant (their id and secret token) consents, plays their assigned
episodes, and answers the questionnaire (once; each answer checked against its question). Every
turn is stored before the answer goes back, and a turn that could not be stored is not shown; an
episode whose game is not in memory (first visit, a restarted server, or turns another server
stored) is rebuilt from the stored turns. A participant never sees the condition, the opponent or its VS candidates.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, Header, HTTPException

from baselines.apps.people.api_models import TOKEN_HEADER_LENGTH, Answers, Say, ToolUse
from baselines.apps.people.game import GameSettings, HumanGame, InvalidMove
from baselines.apps.people.guard import redact, same_secret
from baselines.apps.people.storage import AlreadyAnswered, StaleTurns, StudyStore
from baselines.apps.people.study import StudyConfig
from scope_envs.core.seeding import derive_seed

LOG = logging.getLogger(__name__)


def enrol_all(study: StudyConfig, store: StudyStore) -> dict[str, str]:
    """Enrols the study's participants (tokens and assignments kept across restarts): id -> token."""

    def assignments_of(position: int) -> list[tuple[str, str, int]]:
        return [
            (condition, scenario, derive_seed(study.seed, position, slot))
            for slot, (condition, scenario) in enumerate(study.assign(position))
        ]

    return {pid: store.enrol(pid, assignments_of) for pid in study.participant_ids()}


def participant_links(base_url: str, tokens: dict[str, str]) -> list[str]:
    return [f"{base_url}/study?participant={pid}&token={token}" for pid, token in tokens.items()]


class StudyRunner:
    """The games of a study's participants, kept in step with the store: a game in memory holds
    exactly the turns stored for it (`stored`), or it is dropped and rebuilt from the store."""

    def __init__(self, study: StudyConfig, store: StudyStore) -> None:
        study.check_stored(store.episodes())
        self.study, self.store = study, store
        self.games: dict[tuple[str, int], HumanGame] = {}
        self.stored: dict[tuple[str, int], int] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def lock(self, pid: str) -> threading.Lock:
        """One lock per participant: one person's opponent never waits on another's."""
        with self._locks_lock:
            return self._locks.setdefault(pid, threading.Lock())

    def current(self, pid: str) -> dict[str, Any] | None:
        return next((e for e in self.store.episodes(pid) if e["status"] != "done"), None)

    def game(self, pid: str, episode: dict[str, Any]) -> HumanGame:
        key = (pid, episode["slot"])
        turns = self.store.turns(pid, episode["slot"])
        if key in self.games and self.stored.get(key) != len(turns):
            self.forget(key)  # another server stored turns of this episode: start from the store
        if key not in self.games:  # first visit, or the server restarted: rebuild from the stored turns
            study = self.study
            game = HumanGame(
                GameSettings(
                    study.env,
                    study.side,
                    study.opponent_of(episode["condition"]),
                    episode["seed"],
                    episode["scenario"],
                    env_kwargs=study.env_kwargs,
                )
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                game.replay(turns)  # stored turns are stepped again, never asked of the opponent
            self.games[key], self.stored[key] = game, len(turns)
            self.keep(pid, episode, game)  # what the opponent said since (its opening turn)
        return self.games[key]

    def forget(self, key: tuple[str, int]) -> None:
        game = self.games.pop(key, None)
        self.stored.pop(key, None)
        if game is not None:
            game.close()

    def keep(self, pid: str, episode: dict[str, Any], game: HumanGame) -> None:
        """Stores the turns the store does not hold yet, and a finished episode's record with
        them; if that fails, the game is dropped, so that nobody sees a turn that was not stored."""
        key = (pid, episode["slot"])
        log = game.state()["log"]
        stored = self.stored[key]
        record = None
        if game.over:
            extra = {"participant": pid, "condition": episode["condition"], "slot": episode["slot"]}
            record = game.record(source="study", extra=extra).to_dict()
        try:
            self.store.add_turns(pid, episode["slot"], stored, log[stored:], record)
        except StaleTurns as error:
            self.forget(key)
            raise HTTPException(409, "this conversation changed in another window; reload the page") from error
        except sqlite3.Error as error:
            LOG.error("could not store turns of %s: %s", pid, error)
            self.forget(key)
            raise HTTPException(503, "your turn could not be stored, so it was not taken; try again") from error
        self.stored[key] = len(log)
        if game.over:
            self.forget(key)

    def view(self, pid: str) -> dict[str, Any]:
        """What the participant's page shows."""
        study, person, episodes = self.study, self.store.participant(pid), self.store.episodes(pid)
        view: dict[str, Any] = {
            "study": study.name,
            "participant": pid,
            "instructions": study.instructions,
            "consent": study.consent,
            "consented": person["consented_at"] is not None,
            "episodes": [{"slot": e["slot"], "status": e["status"]} for e in episodes],
            "questionnaire": [q.model_dump() for q in study.questionnaire],
            "answered": person["answers"] is not None,
        }
        done = [e for e in episodes if e["status"] == "done" and e["record"]]
        if done:  # how the latest conversation ended, shown before the next one
            record = done[-1]["record"]
            view["last"] = {
                "slot": done[-1]["slot"],
                "side": study.side,
                "end_reason": record["end_reason"],
                "log": [{k: v for k, v in entry.items() if k != "vs"} for entry in record["log"]],
            }
        episode = self.current(pid)
        if view["consented"] and episode is not None:
            state = self.game(pid, episode).state()
            state["opponent"] = ""  # a participant never learns the condition
            state["log"] = [{k: v for k, v in entry.items() if k != "vs"} for entry in state["log"]]
            view["current"] = {"slot": episode["slot"], "state": state}
        return view


def study_router(runner: StudyRunner | None, moves: ThreadPoolExecutor) -> APIRouter:
    router = APIRouter(prefix="/api/study")

    def admitted(pid: str, token: str) -> StudyRunner:
        if runner is None:
            raise HTTPException(404, "this server runs no study")
        expected = runner.store.token_of(pid) if len(pid) <= 64 else None
        if expected is None or not same_secret(token, expected):
            raise HTTPException(403, "unknown participant or wrong token")
        return runner

    async def run(function: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(moves, function)

    def locked_view(pid: str, token: str, before: Callable[[StudyRunner], Any] | None = None) -> dict[str, Any]:
        study = admitted(pid, token)
        with study.lock(pid):
            if before is not None:
                before(study)
            return study.view(pid)

    @router.get("/{pid}")
    async def status(pid: str, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)) -> dict[str, Any]:
        return await run(lambda: locked_view(pid, x_token))

    @router.post("/{pid}/consent")
    async def consent(pid: str, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)) -> dict[str, Any]:
        return await run(lambda: locked_view(pid, x_token, lambda study: study.store.consent(pid)))

    def move(pid: str, token: str, act: Callable[[HumanGame], Any]) -> dict[str, Any]:
        study = admitted(pid, token)
        with study.lock(pid):
            if study.store.participant(pid)["consented_at"] is None:
                raise HTTPException(409, "consent first")
            episode = study.current(pid)
            if episode is None:
                raise HTTPException(409, "all your episodes are done")
            game = study.game(pid, episode)
            try:
                act(game)
            except InvalidMove as error:
                raise HTTPException(400, redact(str(error))) from error
            study.keep(pid, episode, game)
            for _ in range(3):  # the turn is stored; another server may move on before the view is built
                try:
                    return study.view(pid)
                except HTTPException as error:
                    if error.status_code != 409:
                        raise
            raise HTTPException(503, "your turn is stored; reload the page to see it")

    @router.post("/{pid}/say")
    async def say(
        pid: str, body: Say, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        return await run(lambda: move(pid, x_token, lambda game: game.say(body.text)))

    @router.post("/{pid}/tool")
    async def tool(
        pid: str, body: ToolUse, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        return await run(lambda: move(pid, x_token, lambda game: game.call_tool(body.name, body.arguments)))

    def answer(pid: str, token: str, answers: dict[str, Any]) -> dict[str, Any]:
        study = admitted(pid, token)
        try:
            checked = study.study.check_answers(answers)
        except ValueError as error:
            raise HTTPException(422, str(error)) from error
        with study.lock(pid):
            if study.current(pid) is not None:
                raise HTTPException(409, "finish your episodes first")
            try:
                study.store.save_answers(pid, checked)
            except AlreadyAnswered as error:
                raise HTTPException(409, "your answers are stored already") from error
            return study.view(pid)

    @router.post("/{pid}/answers")
    async def answers(
        pid: str, body: Answers, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        return await run(lambda: answer(pid, x_token, body.answers))

    return router
