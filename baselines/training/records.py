"""The episode record: one conversation as saved by play, studies and training, one JSON object a line.

Schema (every key always present):

* `env`, `scenario_id`, `seed`, `step` (training step, None outside training), `source`
  (`"play"`, `"study"`, `"train"`);
* `players`: `{side: spec or label}`, e.g. `{"agent": "human", "user": "scripted"}`; `simulator`:
  the identity of the side that is not trained or played by a person (spec, pool snapshot label);
* `log`: the conversation in order, `[{"side": "agent"|"user", "message": OpenAI dict}]`, tool
  calls and tool results included; a message a policy produced from Verbalized Sampling carries
  `"vs": {"candidates": [...], "probabilities": [...]}` beside it;
* `messages`: each side's final own view (OpenAI format), ready for SFT;
* `rewards`, `reward_info` (`{side: {"reward", "components", ...}}`), `end_reason`, `turns`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SOURCES = ("play", "study", "train")


@dataclass
class EpisodeRecord:
    env: str
    scenario_id: str
    seed: int | None
    players: dict[str, str]
    log: list[dict[str, Any]]
    messages: dict[str, list[dict[str, Any]]]
    rewards: dict[str, float]
    reward_info: dict[str, dict[str, Any]]
    end_reason: str
    turns: int
    simulator: str = ""
    step: int | None = None
    source: str = "play"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        known = set(cls.__dataclass_fields__)
        missing = {"env", "scenario_id", "log", "rewards", "end_reason"} - set(data)
        if missing:
            raise ValueError(f"not an episode record: missing {sorted(missing)}")
        record = {key: value for key, value in data.items() if key in known}
        record.setdefault("seed", None)
        record.setdefault("players", {})
        record.setdefault("messages", {})
        record.setdefault("reward_info", {})
        record.setdefault("turns", 0)
        return cls(**record)


def log_entries(log: Iterable[tuple[str, Any]], vs_of: dict[int, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """An env's `log` (`(side, Message)` pairs) as record entries; `vs_of[i]` annotates entry i."""
    entries = []
    for position, (side, message) in enumerate(log):
        entry: dict[str, Any] = {"side": side, "message": message.to_openai()}
        if vs_of and position in vs_of:
            entry["vs"] = vs_of[position]
        entries.append(entry)
    return entries


def append_records(path: str | Path, records: Iterable[EpisodeRecord]) -> None:
    """Appends records to a JSONL file (created with its folder), flushed to disk."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record.to_dict(), ensure_ascii=False, default=str) + "\n")
        handle.flush()


def read_records(path: str | Path) -> Iterator[EpisodeRecord]:
    """The records of a JSONL file; a last line cut short by a crash is skipped, any other bad line
    is an error naming the file and line."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                return
            raise ValueError(f"{path}:{number}: not JSON ({error})") from error
        try:
            yield EpisodeRecord.from_dict(data)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}:{number}: {error}") from error
