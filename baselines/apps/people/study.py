"""Study files: what a human study compares, on which scenarios, and how participants are assigned.

```yaml
name: pilot
env: MyEnv               # a registered environment (`scope envs` lists them)
side: user               # the side participants play
env_kwargs: {}
instructions: Read your task, then chat with your partner...
consent: I agree that my messages are stored for research.
conditions:              # what participants play against: any policy spec, checkpoint or simulator
  - {name: scripted, opponent: scripted}
  - {name: trained, opponent: "hf:runs/cotrain/checkpoints/step-000100/agent/policy"}
scenarios: ["0", "1", "2"]   # task ids
episodes_per_participant: 2
assignment: balanced     # balanced (conditions rotate with the participant) or random (seeded)
participants: [p01, p02] # or a count: 20 gives p01..p20
questionnaire:
  - {id: natural, question: "How natural was the conversation?", scale: [1, 5]}
seed: 0
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from scope_envs.core.registration import find_env
from scope_envs.core.seeding import derive_seed


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    opponent: str = Field(min_length=1, max_length=500)


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64)
    question: str = Field(min_length=1, max_length=1000)
    scale: tuple[int, int] | None = None  # None: a free-text answer


class StudyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)
    env: str
    side: Literal["agent", "user"] = "user"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    instructions: str = ""
    consent: str = "I agree that my messages and answers are stored for research."
    conditions: list[Condition] = Field(min_length=1)
    scenarios: list[str] = Field(min_length=1)
    episodes_per_participant: int = Field(default=1, ge=1, le=50)
    assignment: Literal["balanced", "random"] = "balanced"
    participants: list[str] | int = 0
    questionnaire: list[Question] = Field(default_factory=list)
    seed: int = 0

    @field_validator("env")
    @classmethod
    def _known_env(cls, name: str) -> str:
        find_env(name)  # raises ValueError naming the registered envs
        return name

    @model_validator(mode="after")
    def _unique_names(self) -> StudyConfig:
        names = [c.name for c in self.conditions]
        if len(set(names)) != len(names):
            raise ValueError(f"condition names must be unique, got {names}")
        return self

    def participant_ids(self) -> list[str]:
        if isinstance(self.participants, int):
            width = len(str(self.participants))
            return [f"p{i:0{max(width, 2)}d}" for i in range(1, self.participants + 1)]
        return list(self.participants)

    def assign(self, participant_index: int) -> list[tuple[str, str]]:
        """The (condition, scenario) of each of a participant's episodes."""
        n = self.episodes_per_participant
        if self.assignment == "balanced":
            return [
                (
                    self.conditions[(participant_index + slot) % len(self.conditions)].name,
                    self.scenarios[(participant_index * n + slot) % len(self.scenarios)],
                )
                for slot in range(n)
            ]
        import numpy as np

        rng = np.random.default_rng(derive_seed(self.seed, participant_index))
        return [
            (self.conditions[int(rng.integers(len(self.conditions)))].name, str(rng.choice(self.scenarios)))
            for _ in range(n)
        ]

    def opponent_of(self, condition: str) -> str:
        return next(c.opponent for c in self.conditions if c.name == condition)

    def check_answers(self, answers: dict[str, Any]) -> dict[str, Any]:
        """The answers, each checked against its question: every question answered, a scale
        question with a whole number on its scale, a free-text one with text. Raises ValueError."""
        questions = {q.id: q for q in self.questionnaire}
        unknown = sorted(set(answers) - set(questions))
        if unknown:
            raise ValueError(f"unknown questions {unknown}")
        missing = [qid for qid in questions if qid not in answers]
        if missing:
            raise ValueError(f"please answer every question (missing: {', '.join(missing)})")
        for qid, answer in answers.items():
            scale = questions[qid].scale
            if scale is None:
                if not isinstance(answer, str):
                    raise ValueError(f"{qid}: the answer is text")
            elif isinstance(answer, bool) or not isinstance(answer, int) or not scale[0] <= answer <= scale[1]:
                raise ValueError(f"{qid}: answer with a whole number from {scale[0]} to {scale[1]}")
        return dict(answers)

    def check_stored(self, episodes: list[dict[str, Any]]) -> None:
        """Raises ValueError when a study database assigns a condition this file no longer has."""
        names = {c.name for c in self.conditions}
        lost = sorted({e["condition"] for e in episodes} - names)
        if lost:
            raise ValueError(
                f"the study database assigns conditions {lost} that the study file no longer has "
                f"(it has {sorted(names)}); restore them, or start a new database with --study-db"
            )


def check_scenarios(study: StudyConfig) -> None:
    """Resets the study's env on each scenario once, so a wrong task id is reported before anyone plays."""
    env = find_env(study.env).make(**study.env_kwargs)
    try:
        for scenario in study.scenarios:
            env.reset(seed=study.seed, options={"task_id": scenario})
    finally:
        env.close()


def load_study(path: str | Path) -> StudyConfig:
    """A study file, checked: a clear error names what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no study file at {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{where}: not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a study file is a YAML mapping")
    try:
        return StudyConfig.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'study'}: {e['msg']}" for e in error.errors()
        )
        raise ValueError(f"{path}: {problems}") from None
