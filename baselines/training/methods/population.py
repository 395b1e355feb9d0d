"""`population`: co-training whose groups are played by the live simulator or one of its recent
snapshots, drawn per group from a FIFO checkpoint pool (`sim_pool/` of the run folder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from baselines.training.methods.base import MemoryTerms
from baselines.training.methods.cotrain import CoTrain
from baselines.training.run import POOL_FOLDER, RunError
from scope_envs.core.dialogue import AGENT, USER
from sims.opponents import LIVE, Population
from sims.pool import CheckpointPool


class PopulationCoTrain(CoTrain):
    pool: CheckpointPool | None = None

    def memory(self) -> MemoryTerms:
        config = self.config
        return MemoryTerms(super().memory().models, resident_snapshots=min(config.pool_size, config.groups_per_step))

    def start(self, trainer: Any) -> None:
        self._make_pool(trainer)

    def _make_pool(self, trainer: Any) -> None:
        config = self.config
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
        record: dict[str, float] = {}
        for label in sorted(set(labels)):
            played = [e.rewards[AGENT] for e in episodes if labels[e.group] == label]
            record[f"pool/agent_reward/{label}"] = float(np.mean(played))
        record["pool/live_share"] = labels.count(LIVE) / len(labels)
        record["pool/size"] = len(self.pool.members)
        record["pool/age_mean"] = float(np.mean(self.pool.ages(step + 1)))
        self.pool.release()
        return record

    def after_step(self, trainer: Any, step: int) -> None:
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
