"""What the web app is started with (`ServerSettings`) and the request bodies it accepts, each
field with a length limit; unknown fields are refused."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from baselines.people.study import StudyConfig

MAX_TEXT = 4000
MAX_ARGUMENTS_JSON = 8000
TOKEN_HEADER_LENGTH = 100


@dataclass
class ServerSettings:
    opponents: list[str] = field(default_factory=lambda: ["scripted"])  # the specs players may choose
    envs: list[str] | None = None  # None: every registered env
    save_path: Path | None = None  # where finished play episodes are appended (JSONL)
    study: StudyConfig | None = None
    study_db: Path | None = None
    run_dir: Path | None = None
    access_token: str | None = None
    env_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)  # env name -> constructor arguments


class Limited(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewGame(Limited):
    env: str = Field(max_length=100)
    side: str = Field(pattern="^(agent|user)$")
    opponent: str = Field(default="scripted", max_length=500)
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
    answers: dict[str, str | int] = Field(max_length=50)

    @field_validator("answers")
    @classmethod
    def _short(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        if any(len(str(k)) > 64 or len(str(v)) > MAX_TEXT for k, v in value.items()):
            raise ValueError(f"question ids are at most 64 characters, answers at most {MAX_TEXT}")
        return value
