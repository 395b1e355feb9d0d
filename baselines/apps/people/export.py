"""`scope export RUN_DIR|EPISODES.jsonl --format jsonl|hf OUT` and `scope study export`.

The Hugging Face dataset has one row per episode (columns below); it loads back with
`datasets.load_from_disk(OUT)`. `agent_messages` and `user_messages` are each side's own view in
OpenAI chat format (JSON text per message keeps tool calls exact), ready for SFT.

| column | type | what |
|---|---|---|
| `env`, `scenario_id`, `end_reason`, `simulator`, `source` | string | |
| `seed`, `step`, `turns` | int (step -1 outside training) | |
| `agent_reward`, `user_reward` | float | |
| `agent_components`, `user_components` | string (JSON) | the reward breakdown |
| `agent_messages`, `user_messages` | list of {role, content, tool_calls, tool_call_id, name} | strings; |
|  |  | `tool_calls` is the OpenAI list as JSON text |
| `players` | string (JSON) | who played each side |
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from baselines.apps.people.episode_store import read_run_episodes
from baselines.apps.people.storage import StudyStore
from baselines.training.records import EpisodeRecord, append_records

SIDES = ("agent", "user")


def load_episodes(source: str | Path) -> list[EpisodeRecord]:
    path = Path(source)
    if not path.exists():
        raise ValueError(f"{path}: no run folder or episodes file there")
    records = [EpisodeRecord.from_dict(r) for r in read_run_episodes(path)]
    if not records:
        raise ValueError(f"{path}: no saved episodes (train with save_episodes > 0)")
    return records


def _message_row(message: dict[str, Any]) -> dict[str, str]:
    content = message.get("content")
    return {
        "role": message["role"],
        "content": content if isinstance(content, str) else ("" if content is None else json.dumps(content)),
        "tool_calls": json.dumps(message.get("tool_calls") or []),
        "tool_call_id": message.get("tool_call_id") or "",
        "name": message.get("name") or "",
    }


def dataset_row(record: EpisodeRecord) -> dict[str, Any]:
    row: dict[str, Any] = {
        "env": record.env,
        "scenario_id": record.scenario_id,
        "seed": -1 if record.seed is None else int(record.seed),
        "step": -1 if record.step is None else int(record.step),
        "turns": int(record.turns),
        "end_reason": record.end_reason,
        "simulator": record.simulator,
        "source": record.source,
        "players": json.dumps(record.players),
    }
    for side in SIDES:
        info = record.reward_info.get(side, {})
        row[f"{side}_reward"] = float(record.rewards.get(side, 0.0))
        row[f"{side}_components"] = json.dumps(info.get("components", {}))
        row[f"{side}_messages"] = [_message_row(m) for m in record.messages.get(side, [])]
    return row


def export_episodes(source: str | Path, out: str | Path, fmt: str) -> int:
    """Writes the episodes of `source` to `out`; returns how many."""
    records = load_episodes(source)
    out = Path(out)
    if fmt == "jsonl":
        if out.exists():
            raise ValueError(f"{out} exists; choose a new path")
        append_records(out, records)
    elif fmt == "hf":
        import datasets

        features = datasets.Features(
            {
                **{
                    k: datasets.Value("string")
                    for k in ("env", "scenario_id", "end_reason", "simulator", "source", "players")
                },
                **{k: datasets.Value("int64") for k in ("seed", "step", "turns")},
                **{f"{s}_reward": datasets.Value("float64") for s in SIDES},
                **{f"{s}_components": datasets.Value("string") for s in SIDES},
                **{
                    f"{s}_messages": datasets.List(
                        {k: datasets.Value("string") for k in ("role", "content", "tool_calls", "tool_call_id", "name")}
                    )
                    for s in SIDES
                },
            }
        )
        dataset = datasets.Dataset.from_list([dataset_row(r) for r in records], features=features)
        dataset.save_to_disk(str(out))
    else:
        raise ValueError(f"--format must be jsonl or hf, got {fmt!r}")
    return len(records)


# ---- studies ---------------------------------------------------------------------------------

RESULT_COLUMNS = (
    "participant",
    "slot",
    "condition",
    "scenario",
    "status",
    "end_reason",
    "turns",
    "agent_reward",
    "success",
    "answers",
)


def study_results(db_path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The per-episode table and the per-condition summary (mean task outcome with a 95% t-interval)."""
    path = Path(db_path)
    if not path.is_file():
        raise ValueError(f"no study database at {path}")
    store = StudyStore(path)
    try:
        answers = {p["id"]: p["answers"] for p in store.participants()}
        rows = []
        for episode in store.episodes():
            record = episode["record"] or {}
            components = record.get("reward_info", {}).get("agent", {}).get("components", {})
            reward = record.get("rewards", {}).get("agent")
            rows.append(
                {
                    "participant": episode["participant"],
                    "slot": episode["slot"],
                    "condition": episode["condition"],
                    "scenario": episode["scenario"],
                    "status": episode["status"],
                    "end_reason": record.get("end_reason", ""),
                    "turns": record.get("turns", len(store.turns(episode["participant"], episode["slot"]))),
                    "agent_reward": reward,
                    "success": components.get("success", reward),
                    "answers": answers.get(episode["participant"]) or "",
                }
            )
    finally:
        store.close()
    return rows, summarize(rows)


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from scipy import stats

    summary = []
    for condition in sorted({r["condition"] for r in rows}):
        outcomes = [float(r["success"]) for r in rows if r["condition"] == condition and r["status"] == "done"]
        n = len(outcomes)
        mean = sum(outcomes) / n if n else math.nan
        low = high = math.nan
        if n >= 2:
            sem = stats.sem(outcomes)
            low, high = (mean, mean) if sem == 0 else stats.t.interval(0.95, n - 1, loc=mean, scale=sem)
        summary.append(
            {
                "condition": condition,
                "episodes": n,
                "outcome_mean": mean,
                "ci95_low": float(low),
                "ci95_high": float(high),
            }
        )
    return summary


def write_study_results(db_path: str | Path, out: str | Path) -> tuple[Path, list[dict[str, Any]]]:
    rows, summary = study_results(db_path)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=RESULT_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "answers": json.dumps(row["answers"]) if row["answers"] else ""})
    summary_path = out.with_suffix(".summary.csv")
    with summary_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(summary[0]) if summary else ["condition"])
        writer.writeheader()
        writer.writerows(summary)
    return out, summary
