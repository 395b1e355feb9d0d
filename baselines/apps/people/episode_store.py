"""Episodes saved by training, read back for people: `scope view`, `scope export`, `scope serve --run`.

Training writes them (`baselines.training.episodes`); an episode saved with an opponent label
(`simulator0`, by older versions) is named here by its spec from the run's config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from baselines.training.episodes import EPISODES_FILE
from baselines.training.records import read_records

__all__ = ["EPISODES_FILE", "read_run_episodes", "spec_of", "summary"]


def spec_of(label: str, config: Any) -> str:
    """The spec behind an opponent label, as the run's method names it (`Method.opponent_spec`)."""
    from baselines.training.methods import method_for

    return method_for(config).opponent_spec(label)


def read_run_episodes(run_dir: str | Path) -> list[dict[str, Any]]:
    """The saved episodes of a run folder (or of one JSONL file), as dicts. An episode saved with
    an opponent label (`simulator0`, by older versions) is named by its spec from the run's config."""
    path = Path(run_dir)
    path = path / EPISODES_FILE if path.is_dir() else path
    if not path.is_file():
        return []
    records = [record.to_dict() for record in read_records(path)]
    config_file = path.parent / "config.yaml"
    if config_file.is_file() and any(re.fullmatch(r"simulator\d+", r["simulator"]) for r in records):
        from baselines.training.config import load_config

        config = load_config(config_file, [])
        for record in records:
            record["simulator"] = spec_of(record["simulator"], config)
    return records


def summary(index: int, record: dict[str, Any]) -> dict[str, Any]:
    """One row of the viewer's list."""
    return {
        "index": index,
        "step": record.get("step"),
        "scenario_id": record["scenario_id"],
        "simulator": record.get("simulator") or "",
        "reward": float(record["rewards"].get("agent", 0.0)),
        "end_reason": record["end_reason"],
        "turns": record.get("turns", 0),
    }
