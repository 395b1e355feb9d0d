"""What the web app is started with (`ServerSettings`) and the request bodies it accepts, each
field with a length limit; unknown fields are refused."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from baselines.apps.people.study import StudyConfig

MAX_TEXT = 4000
MAX_ARGUMENTS_JSON = 8000
TOKEN_HEADER_LENGTH = 100


@dataclass
class ServerSettings:
    # the opponents players may choose: label -> spec (a browser sees and names labels only)
    opponents: dict[str, str] = field(default_factory=lambda: {"scripted": "scripted"})
    envs: list[str] | None = None  # None: every registered env whose tools run no code
    save_path: Path | None = None  # where finished play episodes are appended (JSONL)
    study: StudyConfig | None = None
    study_db: Path | None = None
    run_dir: Path | None = None
    access_token: str | None = None
    env_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)  # env name -> constructor arguments
    public: bool = False  # reachable from other machines (--public): HTTPS cookie, no code-running env
    hosts: list[str] = field(default_factory=list)  # host names it answers to besides loopback's
    max_games: int = 256  # games kept in memory; only finished or idle ones make room
    idle_seconds: float = 900.0  # an unfinished game untouched this long may be saved and dropped
    games_per_minute: int = 30  # new games per client address
    move_workers: int = 32  # threads that run games' turns (opponents may be slow)

    def __post_init__(self) -> None:
        if isinstance(self.opponents, list):  # specs given as a list are their own labels
            self.opponents = opponent_labels(self.opponents)


def opponent_labels(items: list[str]) -> dict[str, str]:
    """`NAME=SPEC` items, or bare specs: a spec that holds no path is its own label, any other is
    `opponentN`, so that no path or file name reaches a browser."""
    labels: dict[str, str] = {}
    for number, item in enumerate(items, 1):
        name, sep, spec = item.partition("=")
        if not (sep and re.fullmatch(r"[A-Za-z][\w.-]{0,63}", name)):
            name, spec = item, item
            if "/" in spec or "\\" in spec or len(spec) > 64:
                name = f"opponent{number}"
        if name in labels:
            raise ValueError(f"two opponents are labelled {name!r}")
        labels[name] = spec
    return labels


def _strings(value: Any) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


class Limited(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _encodable(self) -> Any:
        """JSON may carry lone surrogates (\\ud800), which no file or database can store."""
        for text in _strings(self.model_dump()):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text must be valid Unicode (a lone surrogate was sent)") from None
        return self


class NewGame(Limited):
    env: str = Field(max_length=100)
    side: str = Field(pattern="^(agent|user)$")
    opponent: str = Field(default="scripted", max_length=100)  # a label the server offers
    task_id: str | None = Field(default=None, max_length=200)
    seed: int = Field(default=0, ge=0, lt=2**31 - 1)


class Say(Limited):
    text: str = Field(min_length=1, max_length=MAX_TEXT)


class ToolUse(Limited):
    name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value)) > MAX_ARGUMENTS_JSON:
            raise ValueError(f"tool arguments are at most {MAX_ARGUMENTS_JSON} characters of JSON")
        return value


class Answers(Limited):
    answers: dict[str, Any] = Field(max_length=50)

    @field_validator("answers")
    @classmethod
    def _short(cls, value: dict[str, Any]) -> dict[str, Any]:
        if any(len(str(k)) > 64 or len(str(v)) > MAX_TEXT for k, v in value.items()):
            raise ValueError(f"question ids are at most 64 characters, answers at most {MAX_TEXT}")
        return value
