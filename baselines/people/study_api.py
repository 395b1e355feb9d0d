"""The study API: a participant (their id and secret token) consents, plays their assigned
episodes, and answers the questionnaire. Every turn is stored before the answer goes back; an
episode whose game is not in memory (first visit, or a restarted server) is rebuilt from the
stored turns. A participant never sees the condition, the opponent or its VS candidates.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Header, HTTPException

from baselines.people.api_models import TOKEN_HEADER_LENGTH, Answers, Say, ToolUse
from baselines.people.game import GameSettings, HumanGame, InvalidMove
from baselines.people.storage import StudyStore
from baselines.people.study import StudyConfig
from scope_envs.core.seeding import derive_seed


def enrol_all(study: StudyConfig, store: StudyStore) -> dict[str, str]:
    """Enrols the study's participants (tokens and assignments kept across restarts): id -> token."""
    tokens = {}
    known = {p["id"]: p["token"] for p in store.participants()}
    for pid in study.participant_ids():
        if pid in known:
            tokens[pid] = known[pid]
            continue
        position = len(store.participants())
        assignments = [
            (condition, scenario, derive_seed(study.seed, position, slot))
            for slot, (condition, scenario) in enumerate(study.assign(position))
        ]
        tokens[pid] = store.enrol(pid, assignments)
    return tokens


def participant_links(base_url: str, tokens: dict[str, str]) -> list[str]:
    return [f"{base_url}/study?participant={pid}&token={token}" for pid, token in tokens.items()]


class StudyRunner:
    """The games of a study's participants, kept in step with the store."""

    def __init__(self, study: StudyConfig, store: StudyStore) -> None:
        self.study, self.store = study, store
        self.games: dict[tuple[str, int], HumanGame] = {}
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
                game.replay(self.store.turns(pid, episode["slot"]))
            self.games[key] = game
            self.keep(pid, episode, game)
        return self.games[key]

    def keep(self, pid: str, episode: dict[str, Any], game: HumanGame) -> None:
        """Stores the turns the store does not hold yet; a finished episode's record too."""
        log = game.state()["log"]
        stored = len(self.store.turns(pid, episode["slot"]))
        self.store.add_turns(pid, episode["slot"], stored, log[stored:])
        if game.over:
            extra = {"participant": pid, "condition": episode["condition"], "slot": episode["slot"]}
            self.store.finish_episode(pid, episode["slot"], game.record(source="study", extra=extra).to_dict())
            self.games.pop((pid, episode["slot"]), None)

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
        episode = self.current(pid)
        if view["consented"] and episode is not None:
            state = self.game(pid, episode).state()
            state["opponent"] = ""  # a participant never learns the condition
            state["log"] = [{k: v for k, v in entry.items() if k != "vs"} for entry in state["log"]]
            view["current"] = {"slot": episode["slot"], "state": state}
        return view


def study_router(runner: StudyRunner | None) -> APIRouter:
    router = APIRouter(prefix="/api/study")

    def admitted(pid: str, token: str) -> StudyRunner:
        if runner is None:
            raise HTTPException(404, "this server runs no study")
        if len(pid) > 64 or not runner.store.check_token(pid, token):
            raise HTTPException(403, "unknown participant or wrong token")
        return runner

    @router.get("/{pid}")
    def status(pid: str, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)) -> dict[str, Any]:
        study = admitted(pid, x_token)
        with study.lock(pid):
            return study.view(pid)

    @router.post("/{pid}/consent")
    def consent(pid: str, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)) -> dict[str, Any]:
        study = admitted(pid, x_token)
        with study.lock(pid):
            study.store.consent(pid)
            return study.view(pid)

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
                raise HTTPException(400, str(error)) from error
            study.keep(pid, episode, game)
            return study.view(pid)

    @router.post("/{pid}/say")
    def say(pid: str, body: Say, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)) -> dict[str, Any]:
        return move(pid, x_token, lambda game: game.say(body.text))

    @router.post("/{pid}/tool")
    def tool(
        pid: str, body: ToolUse, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        return move(pid, x_token, lambda game: game.call_tool(body.name, body.arguments))

    @router.post("/{pid}/answers")
    def answers(
        pid: str, body: Answers, x_token: str = Header(default="", max_length=TOKEN_HEADER_LENGTH)
    ) -> dict[str, Any]:
        study = admitted(pid, x_token)
        unknown = set(body.answers) - {q.id for q in study.study.questionnaire}
        if unknown:
            raise HTTPException(422, f"unknown questions {sorted(unknown)}")
        with study.lock(pid):
            if study.current(pid) is not None:
                raise HTTPException(409, "finish your episodes first")
            study.store.save_answers(pid, body.answers)
            return study.view(pid)

    return router
