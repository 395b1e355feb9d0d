"""Episodes saved by training: a sample of each step's episodes, beside its metrics.

`record_episodes(trainer)` wraps one training step: it watches the step's rollout (the envs it
makes, the opponent label of each group, the Verbalized Sampling candidates of the opponents'
replies) and, when the step finishes, appends `config.save_episodes` of its episodes, drawn with
`derive_seed(seed, step, SALT)`, to `RUN_DIR/episodes.jsonl` as `EpisodeRecord`s (`source:
"train"`). A benchmark's vectorized rollout has no chat log: its episodes are saved without one.
A fresh run starts the file over; a resumed run drops what was saved after its checkpoint.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from baselines.people.game import ReplyRecorder, vs_annotations
from baselines.people.records import EpisodeRecord, append_records, log_entries, read_records
from scope_envs.core.batch import TracedPolicy
from scope_envs.core.dialogue import SIDES
from scope_envs.core.rollout import collect_chat
from scope_envs.core.seeding import derive_seed

EPISODES_FILE = "episodes.jsonl"
SALT = 7919  # keeps the draw of saved episodes apart from the step's other random streams
_prepared: weakref.WeakSet[Any] = weakref.WeakSet()


def choose(count: int, total: int, *parts: int) -> list[int]:
    """`count` of `total` episode indices, sorted, drawn by `derive_seed(*parts)`."""
    if count <= 0 or total == 0:
        return []
    rng = np.random.default_rng(derive_seed(*parts))
    return sorted(int(i) for i in rng.choice(total, size=min(count, total), replace=False))


def _prepare(trainer: Any, path: Path) -> None:
    """Once per trainer: a fresh run starts the file over, a resumed one keeps only its steps."""
    if trainer in _prepared:
        return
    _prepared.add(trainer)
    if not path.exists():
        return
    if trainer.step == 0:
        path.unlink()
        return
    kept = [r for r in read_records(path) if r.step is None or r.step <= trainer.step]
    path.unlink()
    append_records(path, kept)


@contextlib.contextmanager
def record_episodes(trainer: Any) -> Iterator[None]:
    """Saves a sample of the episodes of the training step run inside it; see the module docstring."""
    count = int(getattr(trainer.config, "save_episodes", 0))
    if count <= 0:
        yield
        return
    path = Path(trainer.output) / EPISODES_FILE
    _prepare(trainer, path)
    seen: dict[str, Any] = {"labels": [], "envs": [], "episodes": [], "groups": [], "recorders": {}}
    chat = trainer.rollout is collect_chat
    original_players, original_rollout = trainer.players, trainer.rollout

    def players(step: int, groups: int) -> tuple[list[dict[str, Any]], list[str]]:
        chosen, labels = original_players(step, groups)
        seen["labels"] = list(labels)
        if chat:
            chosen = [
                {side: p if side in trainer.learners else _recording(p, seen["recorders"]) for side, p in g.items()}
                for g in chosen
            ]
        return chosen, labels

    def rollout(make_env: Any, groups: Any, **kwargs: Any) -> Any:
        def make() -> Any:
            env = make_env()
            seen["envs"].append(env)
            return env

        episodes = original_rollout(make, groups, **kwargs)
        # each episode's group as played (a learner rank renumbers its share's groups afterwards)
        seen["episodes"], seen["groups"] = episodes, [groups[episode.group] for episode in episodes]
        return episodes

    trainer.players, trainer.rollout = players, rollout
    try:
        yield
    finally:
        del trainer.players  # the instance attributes go; the class's method is back
        trainer.rollout = original_rollout
    step = trainer.step + 1  # the metrics line's step
    append_records(path, _records(trainer, seen, step, count))


def _recording(player: Any, recorders: dict[int, Any]) -> Any:
    """The player wrapped once per step to keep VS candidates; trained policies are left as they are."""
    if isinstance(player, TracedPolicy) or not hasattr(player, "respond"):
        return player
    if id(player) not in recorders:
        recorders[id(player)] = ReplyRecorder(player)
    return recorders[id(player)]


def _records(trainer: Any, seen: dict[str, Any], step: int, count: int) -> list[EpisodeRecord]:
    episodes, groups, labels = seen["episodes"], seen["groups"], seen["labels"]
    envs = seen["envs"][-len(episodes) :] if len(seen["envs"]) > len(episodes) else []
    members: dict[int, int] = {}
    member_of = []
    for episode in episodes:
        member_of.append(members.get(episode.group, 0))
        members[episode.group] = member_of[-1] + 1
    partner = trainer.partner_side
    records = []
    for index in choose(count, len(episodes), trainer.config.seed, step, SALT):
        episode, group = episodes[index], groups[index]
        env = envs[index] if envs else None
        if env is not None and (env.scenario is None or env.scenario.scenario_id != episode.scenario_id):
            env = None  # not the env of this episode: save it without a log
        log: list[dict[str, Any]] = []
        messages: dict[str, list[dict[str, Any]]] = {}
        if env is not None:
            recorder = group.players.get(partner)
            vs = vs_annotations(env, partner, recorder) if isinstance(recorder, ReplyRecorder) else {}
            log = log_entries(env.log, vs)
            messages = {side: [m.to_openai() for m in env.view(side)] for side in SIDES}
        label = labels[episode.group] if episode.group < len(labels) else ""
        records.append(
            EpisodeRecord(
                env=trainer.env_info.name,
                scenario_id=episode.scenario_id,
                seed=derive_seed(group.seed, member_of[index]),
                players={
                    **{side: "trained" for side in trainer.learners},
                    **({} if partner in trainer.learners else {partner: spec_of(label, trainer.config)}),
                },
                log=log,
                messages=messages,
                rewards=dict(episode.rewards),
                reward_info=episode.reward_info,
                end_reason=episode.end_reason,
                turns=episode.turns,
                simulator=spec_of(label, trainer.config),
                step=step,
                source="train",
                extra={"group": episode.group, "method": trainer.config.method, "opponent_label": label},
            )
        )
    return records


def spec_of(label: str, config: Any) -> str:
    """The spec behind an opponent label: `simulatorN` is the N-th of `config.simulators` (inside
    Verbalized Sampling for method vs); `live` and `snapshot@STEP` are the co-trained simulator."""
    match = re.fullmatch(r"simulator(\d+)", label)
    simulators = list(getattr(config, "simulators", []))
    if match is None or int(match.group(1)) >= len(simulators):
        return label
    spec = simulators[int(match.group(1))]
    return f"vs({spec}, k={config.vs_k})" if config.method == "vs" else spec


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
        from baselines.config import load_config

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
