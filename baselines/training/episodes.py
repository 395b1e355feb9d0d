"""Episodes kept by training: an observer of the rollout protocol, and the sample saved per step.

`observed(rollout)` is a rollout (`scope_envs.core.rollout`'s protocol) that plays through
`rollout` and gives every episode it returns its conversation, `Episode.log`: the env's log as
record entries, the Verbalized Sampling candidates of each reply that had them (`vs`), and each
side's final view (`Episode.messages`). It watches the envs the rollout makes and, for a chat
rollout, wraps each player that is not being trained in a `ReplyRecorder`; an API player's own
`arespond` is kept, so lockstep, async and (inside each rollout worker) Ray rollouts keep the same
episodes and all keep their candidates. A benchmark's vectorized rollout makes no chat envs: its
episodes have no log.

`EpisodeSaver` appends `save_episodes` of each training step's episodes, drawn with
`derive_seed(seed, step, SALT)`, to `RUN_DIR/episodes.jsonl` as `EpisodeRecord`s (`source:
"train"`); a fresh run starts the file over, a resumed run drops what was saved after its checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from baselines.training.records import EpisodeRecord, append_records, log_entries, read_records
from scope_envs.core.batch import TracedPolicy
from scope_envs.core.chat import Message
from scope_envs.core.dialogue import SIDES, DialogueEnv
from scope_envs.core.policy import Reply, has_native_async
from scope_envs.core.rollout import Episode, RolloutGroup
from scope_envs.core.seeding import derive_seed
from sims.wrapper import SimulatorWrapper

EPISODES_FILE = "episodes.jsonl"
SALT = 7919  # keeps the draw of saved episodes apart from the step's other random streams


class ReplyRecorder(SimulatorWrapper):
    """Passes replies through and keeps the Verbalized Sampling candidates of each, by the view it answered."""

    def __init__(self, simulator: Any) -> None:
        super().__init__(simulator)
        self.candidates: dict[str, dict[str, Any]] = {}
        if hasattr(simulator, "concurrency"):  # an API player's bound on requests in flight
            self.concurrency = simulator.concurrency

    def respond(self, messages: Any, tools: Any = None, *, seed: int | None = None) -> Reply:
        reply = super().respond(messages, tools, seed=seed)
        self._keep(messages, reply)
        return reply

    def respond_batch(self, batch: Sequence[Any], tools: Any = None, *, seeds: Any = None) -> list[Reply]:
        replies = super().respond_batch(batch, tools, seeds=seeds)
        for messages, reply in zip(batch, replies, strict=True):
            self._keep(messages, reply)
        return replies

    def _keep(self, messages: Any, reply: Reply) -> None:
        if "vs_candidates" in reply.metadata:
            self.candidates[view_key(messages)] = {
                "candidates": list(reply.metadata["vs_candidates"]),
                "probabilities": list(reply.metadata.get("vs_probabilities", [])),
            }


class AsyncReplyRecorder(ReplyRecorder):
    """A `ReplyRecorder` of a player that answers asynchronously (an API client): its own
    `arespond` is awaited, so the rollout plays it as it would unwrapped."""

    async def arespond(self, messages: Any, tools: Any = None, *, seed: int | None = None) -> Reply:
        reply = Reply.coerce(await self.simulator.arespond(messages, tools, seed=seed))
        self._keep(messages, reply)
        return reply


def recorder_of(player: Any) -> Any:
    """`player` wrapped to keep its candidates; a trained policy (or a non-chat player) as it is."""
    if isinstance(player, TracedPolicy) or not hasattr(player, "respond"):
        return player
    return AsyncReplyRecorder(player) if has_native_async(player) else ReplyRecorder(player)


def view_key(messages: Sequence[Any]) -> str:
    """A key for a view (OpenAI dicts or `Message`s), the same for equal views."""
    dicts = [m.to_openai() if isinstance(m, Message) else dict(m) for m in messages]
    return json.dumps(dicts, sort_keys=True, ensure_ascii=False, default=str)


def vs_annotations(env: DialogueEnv, side: str, recorder: ReplyRecorder) -> dict[int, dict[str, Any]]:
    """Log position -> VS candidates for `side`'s replies in `env`'s finished conversation: the
    k-th assistant message of the side's view is its k-th assistant entry in the log."""
    view = env.view(side)
    positions = [i for i, (speaker, message) in enumerate(env.log) if speaker == side and message.role == "assistant"]
    found, k = {}, 0
    for j, message in enumerate(view):
        if message.role != "assistant":
            continue
        if k < len(positions) and (vs := recorder.candidates.get(view_key(view[:j]))) is not None:
            found[positions[k]] = vs
        k += 1
    return found


def observed(rollout: Callable[..., list[Episode]], *, chat: bool = True) -> Callable[..., list[Episode]]:
    """`rollout`, with each episode's conversation kept (see the module docstring); `chat`:
    `rollout` plays chat players (wrapping them is safe), not a benchmark's vectorized rollout."""

    def play(make_env: Callable[[], DialogueEnv], groups: Sequence[RolloutGroup], **kwargs: Any) -> list[Episode]:
        envs: list[DialogueEnv] = []

        def make() -> DialogueEnv:
            env = make_env()
            envs.append(env)
            return env

        recorders: dict[int, Any] = {}

        def wrap(player: Any) -> Any:
            if id(player) not in recorders:
                recorders[id(player)] = recorder_of(player)
            return recorders[id(player)]

        played = [replace(g, players={s: wrap(p) for s, p in g.players.items()}) for g in groups] if chat else groups
        episodes = rollout(make, played, **kwargs)
        # the chat rollouts make a probe env, then one env per episode, in episode order
        own = envs[-len(episodes) :] if episodes and len(envs) > len(episodes) else []
        for episode, env in zip(episodes, own):
            if env.scenario is None or env.scenario.scenario_id != episode.scenario_id:
                continue  # not the env of this episode: it keeps no log
            players = played[episode.group].players if episode.group < len(played) else {}
            vs: dict[int, dict[str, Any]] = {}
            for side, player in players.items():
                if isinstance(player, ReplyRecorder):
                    vs.update(vs_annotations(env, side, player))
            episode.log = log_entries(env.log, vs)
            episode.messages = {side: [m.to_openai() for m in env.view(side)] for side in SIDES}
        return episodes

    return play


def choose(count: int, total: int, *parts: int) -> list[int]:
    """`count` of `total` episode indices, sorted, drawn by `derive_seed(*parts)`."""
    if count <= 0 or total == 0:
        return []
    rng = np.random.default_rng(derive_seed(*parts))
    return sorted(int(i) for i in rng.choice(total, size=min(count, total), replace=False))


def prepare_episodes_file(path: Path, step: int) -> None:
    """A fresh run (`step` 0) starts the file over, a resumed one keeps only its steps."""
    if not path.exists():
        return
    if step == 0:
        path.unlink()
        return
    kept = [r for r in read_records(path) if r.step is None or r.step <= step]
    path.unlink()
    append_records(path, kept)


class EpisodeSaver:
    """Saves a sample of each training step's episodes into a run folder; see the module docstring.
    `players` names the trained sides ("trained") and `spec_of(label)` the opponent of a label."""

    def __init__(
        self, folder: Path, *, env: str, seed: int, count: int, trained: Sequence[str], spec_of: Any, method: str = ""
    ) -> None:
        self.path = Path(folder) / EPISODES_FILE
        self.env, self.seed, self.count, self.method = env, seed, count, method
        self.trained, self.spec_of = list(trained), spec_of
        self._prepared = False

    def save(self, step: int, episodes: list[Episode], labels: list[str]) -> None:
        """The records of training step `step` (counted from 0) of `episodes`, whose group g
        played the opponent `labels[g]`."""
        if self.count <= 0:
            return
        if not self._prepared:
            prepare_episodes_file(self.path, step)
            self._prepared = True
        members: dict[int, int] = {}
        member_of = []
        for episode in episodes:
            member_of.append(members.get(episode.group, 0))
            members[episode.group] = member_of[-1] + 1
        records = []
        for index in choose(self.count, len(episodes), self.seed, step + 1, SALT):
            episode = episodes[index]
            label = labels[episode.group] if episode.group < len(labels) else ""
            spec = self.spec_of(label)
            opponents = {side: spec for side in SIDES if side not in self.trained}
            group_seed = derive_seed(self.seed, step, episode.group, 0)  # the training groups' seed rule
            records.append(
                EpisodeRecord(
                    env=self.env,
                    scenario_id=episode.scenario_id,
                    seed=derive_seed(group_seed, member_of[index]),
                    players={**{side: "trained" for side in self.trained}, **opponents},
                    log=list(episode.log or []),
                    messages=dict(episode.messages or {}),
                    rewards=dict(episode.rewards),
                    reward_info=episode.reward_info,
                    end_reason=episode.end_reason,
                    turns=episode.turns,
                    simulator=spec,
                    step=step + 1,
                    source="train",
                    extra={"group": episode.group, "method": self.method, "opponent_label": label},
                )
            )
        append_records(self.path, records)
