"""`population`: co-training whose groups are played by the live simulator or one of its recent
snapshots, drawn from a FIFO checkpoint pool (`sim_pool/` of the run folder): by default one member
per step, uniform over the snapshots and the live simulator, plays every group of it (`pool_draw:
batch`, as the paper draws one per rollout batch), or one per group (`pool_draw: group`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baselines.training.methods.base import MemoryTerms
from baselines.training.methods.cotrain import CoTrain
from baselines.training.run import POOL_FOLDER, RunError
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.rollout import ActSample
from sims.opponents import LIVE, Population
from sims.pool import CheckpointPool

PROBE_STATES = 256  # at most this many of a step's simulator turns probe the pool's diversity


def probe_states(episodes: Sequence[Any], side: str = USER, limit: int = PROBE_STATES) -> tuple[np.ndarray, np.ndarray]:
    """The features and allowed acts of `side`'s act-level turns (`ActSample`s) in `episodes`, `[N, ...]`:
    all of them, or `limit` evenly spaced in their order (the same for the same episodes)."""
    features, allowed = [], []
    for episode in episodes:
        for sample in episode.samples.get(side, []):
            if isinstance(sample, ActSample):
                features.append(sample.features)
                allowed.append(sample.allowed)
    if not features:
        return np.zeros((0, 0)), np.zeros((0, 0), bool)
    features_all, allowed_all = np.concatenate(features), np.concatenate(allowed)
    if len(features_all) > limit:
        chosen = np.linspace(0, len(features_all) - 1, limit).astype(int)
        features_all, allowed_all = features_all[chosen], allowed_all[chosen]
    return features_all, allowed_all


def reply_diversity(policies: Sequence[Any], features: np.ndarray, mask: np.ndarray) -> float:
    """The mean pairwise total-variation distance between the reply distributions of `policies`
    (each with `act_distribution(features, mask)`), averaged over the states: 0 when they all
    reply alike (or there is only one), 1 when no two ever give the same reply."""
    distributions = [np.asarray(policy.act_distribution(features, mask)) for policy in policies]
    distances = [0.5 * np.abs(a - b).sum(axis=1).mean() for a, b in itertools.combinations(distributions, 2)]
    return float(np.mean(distances)) if distances else 0.0


class PopulationCoTrain(CoTrain):
    pool: CheckpointPool | None = None

    def memory(self) -> MemoryTerms:
        config = self.config
        return MemoryTerms(super().memory().models, resident_snapshots=min(config.pool_size, config.groups_per_step))

    def start(self, trainer: Any) -> None:
        super().start(trainer)
        self._make_pool(trainer)

    def _make_pool(self, trainer: Any) -> None:
        config = self.config
        self._probe_members: dict[str, Any] = {}  # snapshots loaded for `pool/diversity`, by member id
        self.pool = CheckpointPool(
            trainer.output / POOL_FOLDER,
            max_size=config.pool_size,
            sampling=config.pool_sampling,
            loader=lambda directory: self._load_snapshot(trainer, directory),
            retain_evicted=True,
            read_only=not trainer.writer,
        )
        # the pool starts with the initial simulator (kept if the pool already has it)
        if trainer.writer and not self.pool.members:
            self.pool.add(trainer.learners[USER].policy.save, step=0, meta={"origin": "initial simulator"})

    def opponents(self, trainer: Any) -> Population:
        config = self.config
        return Population(
            self.pool,
            trainer.learners[USER].policy,
            seed=config.seed,
            min_live_share=config.live_min_share,
            groups=config.groups_per_step,
            draw=config.pool_draw,
        )

    def _load_snapshot(self, trainer: Any, directory: Path) -> Any:
        """A pool member as a policy: with LoRA, its adapter loaded beside the live ones on their
        resident base; otherwise the simulator's architecture with the member's weights, in
        `dtype` and frozen (it only generates)."""
        live = trainer.learners[USER].policy
        if getattr(live, "is_lora", False):
            return live.snapshot(directory, name=f"pool-{directory.name}")
        spec = self.learners()[USER]
        policy = trainer._build_policy(spec.policy, seed=self.config.seed + spec.seed_offset, side=USER)
        policy.load_weights(directory)
        return policy.freeze_for_generation() if hasattr(policy, "freeze_for_generation") else policy

    def start_fresh(self, trainer: Any) -> None:
        if not (trainer.output / POOL_FOLDER).exists():  # an earlier run's pool was removed: start our own
            self._make_pool(trainer)
            trainer.opponents = self.opponents(trainer)

    def resumed(self, trainer: Any, step: int) -> None:
        self.pool.drop_after(step)
        # refused before any step: a resume draws from the pool exactly as the run did
        members = [member.id for member in self.pool.members]
        state = json.loads((trainer.folder.checkpoint_steps()[step] / "state.json").read_text())
        if state.get("pool", members) != members:  # a checkpoint written before it recorded its pool has none
            lost = sorted(set(state["pool"]) - set(members)) or state["pool"]
            raise RunError(
                f"the simulator pool of step {step} cannot be restored: it held {state['pool']}, and {lost} "
                "are no longer on disk; start over with --overwrite"
            )
        damaged = [problem for member in self.pool.members if (problem := self.pool.damage(member))]
        if damaged:
            raise RunError(f"{'; '.join(damaged)}; restore it, or start over with --overwrite")

    def following(self, trainer: Any) -> None:
        self.pool.refresh()

    def step_metrics(self, trainer: Any, step: int, labels: list[str], episodes: list[Any]) -> dict[str, float]:
        """The agent's reward against each member played, the live simulator's share of the groups,
        the pool's size (snapshots) and mean age, and `pool/diversity`: `reply_diversity` of the
        snapshots and the live simulator on the simulator turns of this step's episodes
        (`probe_states`). Only where every member gives its reply distribution (act-level
        policies, `act_distribution`): for language models it is not logged."""
        record: dict[str, float] = {}
        for label in sorted(set(labels)):
            played = [e.rewards[AGENT] for e in episodes if labels[e.group] == label]
            record[f"pool/agent_reward/{label}"] = float(np.mean(played))
        record["pool/live_share"] = labels.count(LIVE) / len(labels)
        record["pool/size"] = len(self.pool.members)
        record["pool/age_mean"] = float(np.mean(self.pool.ages(step + 1)))
        diversity = self._diversity(trainer, episodes)
        if diversity is not None:
            record["pool/diversity"] = diversity
        self.pool.release()
        return record

    def _diversity(self, trainer: Any, episodes: list[Any]) -> float | None:
        live = trainer.learners[USER].policy
        if not hasattr(live, "act_distribution"):  # a language model: its snapshots are never loaded for this
            return None
        features, mask = probe_states(episodes)
        if not len(features):
            return None
        # A snapshot never changes once written: each is loaded once for this, and kept while in the
        # pool. A damaged one is left out here; the run stops on it when it is drawn to play.
        kept = self._probe_members
        self._probe_members = {
            member.id: kept[member.id] if member.id in kept else self.pool.load(member)
            for member in self.pool.members
            if member.id in kept or self.pool.damage(member) is None
        }
        members = list(self._probe_members.values())
        if not all(hasattr(member, "act_distribution") for member in members):
            return None
        return reply_diversity([*members, live], features, mask)

    def after_step(self, trainer: Any, step: int) -> None:
        super().after_step(trainer, step)
        if step % self.config.pool_every != 0:
            return
        if trainer.writer:
            self.pool.add(trainer.learners[USER].policy.save, step=step)
        if trainer.data_parallel is not None:  # every rank draws from the pool rank 0 now has
            trainer.data_parallel.barrier()
            if not trainer.writer:
                self.pool.refresh()

    def saved(self, trainer: Any, step: int) -> None:
        # a resume may fall back to any kept checkpoint (the newer ones damaged): only members evicted
        # by the oldest of them are no longer needed to restore its pool
        self.pool.purge_evicted(min(trainer.folder.checkpoint_steps(), default=step))
