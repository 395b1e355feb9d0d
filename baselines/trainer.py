"""The multi-turn GRPO trainer: one loop, the methods are configurations of it.

Read top to bottom: `players` says who plays each group (the learners, and the opponents of
`sims.opponents`); `collect` plays the groups through the env's rollout (`scope_envs.core.rollout`:
chat episodes, or the benchmark's own vectorized rollout), every episode stepped together and each
trainable model's turns generated in batches, token-in token-out; `update` turns each group's
rewards into advantages and takes one optimizer step per learner on the clipped policy-gradient
loss; `evaluate` measures held-out success against simulators never trained against; `save` /
`resume` make a killed run continue exactly. Everything random in a step is derived from (seed,
step), so a resumed run replays the same scenarios, samples and pool draws.

Methods: `single`, `ensemble` and `vs` train one side against frozen simulators; `cotrain` also
trains the simulator, on its own turns of the same conversations, with its own optimizer and
reward (adversarial 1 - r, cooperative r, or the curriculum reward); `population` is co-training
whose groups are played by the live simulator or by one of its recent snapshots, drawn per group
from a FIFO checkpoint pool.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from baselines.advantages import RunningBaseline, curriculum_reward, group_advantages
from baselines.checkpoints import (
    atomic_write,
    checkpoint_steps,
    disk_megabytes,
    fsync_directory,
    read_metrics,
    remove_path,
    saved_work,
    verify_checkpoint,
    write_checkpoint_manifest,
)
from baselines.config import TrainConfig, dump_config
from baselines.curves import plot_curves
from baselines.distributed.data_parallel import DataParallel
from baselines.loss import BatchTotals, LossConfig, policy_loss
from baselines.metrics_log import MetricsLog
from baselines.policy import TrainablePolicy, build_policy, language_model_of
from scope_envs.core.async_rollout import collect_async
from scope_envs.core.dialogue import AGENT, USER, DialogueEnv, other_side, user_reward_from
from scope_envs.core.failpoints import failpoint
from scope_envs.core.registration import find_env
from scope_envs.core.rollout import Episode, RolloutGroup, Sample, collect_chat
from scope_envs.core.seeding import derive_seed
from scope_envs.core.specs import make_policy
from sims.opponents import LIVE, Ensemble, Live, Opponents, Population
from sims.pool import CheckpointPool
from sims.verbalized import verbalize

# what a run writes into its output folder, besides its simulator pool (`sim_pool`), and a fresh start
# deletes; anything else there, such as vLLM's served adapters or wandb's own folders, is left alone
# the end of an episode a policy could not play (its API failed after its retries): never trained on
FAILED = "policy_error"
RUN_FILES = ("checkpoints", "metrics.jsonl", "tensorboard", "curves.png", "config.yaml")


class RunError(RuntimeError):
    """A training run that must not start or go on; the message says why and what to do."""


class OutputInUse(RunError):
    """A fresh run into a folder that holds the checkpoints or metrics of another run."""


class NoIntactCheckpoint(RunError):
    """A resume with checkpoints, none of which is intact."""


class TooManyFailedEpisodes(RunError):
    """A training step whose share of failed episodes passes `max_failed_episode_share`."""


@dataclass
class Learner:
    """One trained model: its policy (which keeps its own KL reference), optimizer, loss and baseline."""

    side: str
    policy: TrainablePolicy
    optimizer: Any
    loss_config: LossConfig
    baseline: RunningBaseline = field(default_factory=RunningBaseline)


class Trainer:
    def __init__(self, config: TrainConfig, *, data_parallel: DataParallel | None = None) -> None:
        """`data_parallel`: this process's rank of a data-parallel learner group
        (`baselines.distributed.learner_group`). Every rank runs this trainer in step with the
        others and plays its share of each step's groups; rank 0 writes the run's files."""
        import torch

        self.config = config
        self.data_parallel = data_parallel
        self.output = Path(config.output_dir)
        self.output.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        if config.cpu_threads > 0 and not torch.cuda.is_available():
            torch.set_num_threads(config.cpu_threads)
        self.env_info = find_env(config.env)
        self.probe = self.make_env()
        chat_rollout = collect_async if config.rollout == "async" else collect_chat
        own_rollout = self.env_info.rollout_function()
        # a benchmark's own rollout steps all its groups as arrays: every rank replays it whole
        self.shard_groups = data_parallel is not None and own_rollout is None
        self.rollout = own_rollout or chat_rollout
        if config.ray_address and data_parallel is None:
            self.rollout = self._ray_rollout(self.rollout)
        self.side, self.partner_side = config.side, other_side(config.side)
        self.cotraining = config.method in {"cotrain", "population"}
        self._engines: dict[str, Any] = {}  # vLLM engines by base model
        self.learners = {
            self.side: self._learner(self.side, config.policy, config.lr, config.kl_coef, seed=config.seed)
        }
        if self.cotraining:
            spec = config.simulator_policy or config.policy
            lr = config.simulator_lr if config.simulator_lr is not None else config.lr
            # two LoRA adapters of one model share ONE frozen base
            shared = self.learners[self.side].policy if config.lora and spec == config.policy else None
            self.learners[USER] = self._learner(
                USER, spec, lr, config.simulator_kl_coef, seed=config.seed + 1, base=shared
            )
        self.metrics_path = self.output / "metrics.jsonl"
        self.checkpoints = self.output / "checkpoints"
        self._earlier_work = saved_work(self.output)  # before this trainer adds to the folder
        self._earlier_pool = (self.output / "sim_pool").exists()
        self.pool = self._make_pool()
        self._seed_pool()
        self.opponents = self._opponents()
        self.step = 0

    @property
    def writer(self) -> bool:
        """This process writes the run's files: it trains alone, or is rank 0 of a learner group."""
        return self.data_parallel is None or self.data_parallel.writer

    def _ray_rollout(self, local: Any) -> Any:
        """Rollout workers on Ray for the groups of frozen or small players; `local` plays the others."""
        from baselines.distributed.cluster import connect
        from baselines.distributed.ray_rollout import RayRollout

        config = self.config
        connect(config.ray_address, num_cpus=config.ray_workers)
        return RayRollout(
            config.env,
            config.env_kwargs,
            local=local,
            workers=config.ray_workers,
            rollout=config.rollout,
            groups_per_task=config.ray_groups_per_task,
        )

    def _learner(self, side: str, spec: str, lr: float, kl_coef: float, *, seed: int, base: Any = None) -> Learner:
        import torch

        config = self.config
        policy = base.with_adapter(side) if base is not None else self._build_policy(spec, seed=seed, side=side)
        optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=lr, weight_decay=config.weight_decay)
        loss_config = self.loss_config(config, kl_coef)
        if kl_coef > 0:
            policy.freeze_reference()
        if config.generation_engine == "vllm":
            policy.engine = self._vllm_engine(spec).handle(side)
            policy.engine.sync(policy)
        return Learner(side, policy, optimizer, loss_config, RunningBaseline(decay=config.rae_decay))

    @staticmethod
    def loss_config(config: TrainConfig, kl_coef: float) -> LossConfig:
        """The loss of a learner. Dr. GRPO's constant (`aggregation: constant`) is the paper's:
        each sequence's summed token losses over the generation budget of one sequence, which in
        a multi-turn episode is the cap on its whole length, `max_model_len`; then the mean over
        the step's sequences."""
        return LossConfig(
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            kl_coef=kl_coef,
            aggregation=config.aggregation,
            constant_tokens=float(config.max_model_len),
        )

    def _build_policy(self, spec: str, *, seed: int, side: str) -> Any:
        config = self.config
        return build_policy(
            spec,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            device=config.device,
            lora=config.lora,
            seed=seed,
            env=self.probe,
            side=side,
            dtype=config.dtype,
            gradient_checkpointing=config.gradient_checkpointing,
            logprob_chunk=config.logprob_chunk,
            generation_batch=config.generation_batch,
            max_model_len=config.max_model_len,
        )

    def _opponents(self) -> Opponents:
        """Who plays the side opposite the trained one in each group."""
        config = self.config
        if self.pool is not None:
            return Population(
                self.pool,
                self.learners[USER].policy,
                seed=config.seed,
                min_live_share=config.live_min_share,
                groups=config.groups_per_step,
            )
        if self.cotraining:
            return Live(self.learners[USER].policy)
        partners = [make_policy(spec, env=self.probe, side=self.partner_side) for spec in config.simulators]
        if config.method == "vs":
            partners = [verbalize(p, k=config.vs_k, draw=config.vs_draw) for p in partners]
        return Ensemble(partners, mode="round_robin")

    def _make_pool(self) -> CheckpointPool | None:
        if self.config.method != "population":
            return None
        return CheckpointPool(
            self.output / "sim_pool",
            max_size=self.config.pool_size,
            sampling=self.config.pool_sampling,
            loader=self._load_snapshot,
            retain_evicted=True,
            read_only=not self.writer,
        )

    def _seed_pool(self) -> None:
        """A population's pool starts with the initial simulator (kept if the pool already has it)."""
        if self.pool is not None and self.writer and not self.pool.members:
            self.pool.add(self.learners[USER].policy.save, step=0, meta={"origin": "initial simulator"})

    def _vllm_engine(self, spec: str) -> Any:
        """The vLLM engine of a base model; co-trained sides of one base share it (two adapters)."""
        base = language_model_of(spec) or spec
        if base not in self._engines:
            from baselines.vllm_engine import VLLMGeneration

            config = self.config
            served = self.output / "served_adapters"  # each rank of a learner group serves its own copy
            self._engines[base] = VLLMGeneration(
                base,
                adapter_dir=served / f"rank-{self.data_parallel.rank}" if self.data_parallel is not None else served,
                temperature=config.temperature,
                max_new_tokens=config.max_new_tokens,
                max_lora_rank=int(config.lora["r"]) if config.lora else 64,
                gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                max_model_len=config.max_model_len,
                dtype=config.dtype,
            )
        return self._engines[base]

    def make_env(self) -> DialogueEnv:
        return self.env_info.make(**self.config.env_kwargs)

    # ---- who plays each group ------------------------------------------------------------------

    def players(self, step: int, groups: int) -> tuple[list[dict[str, Any]], list[str]]:
        """Each group's player per side (the learners, and the opponent the group drew), and the
        label of the opponent (for metrics and per-simulator baselines)."""
        players, labels = [], []
        for group in range(groups):
            label, opponent = self.opponents.pick(step, group)
            players.append(
                {**{side: learner.policy for side, learner in self.learners.items()}, self.partner_side: opponent}
            )
            labels.append(label)
        return players, labels

    def _load_snapshot(self, directory: Path) -> Any:
        """A pool member as a policy: with LoRA, its adapter loaded beside the live ones on their
        resident base; otherwise the simulator's architecture with the member's weights, in
        `dtype` and frozen (it only generates)."""
        live = self.learners[USER].policy
        if getattr(live, "is_lora", False):
            return live.snapshot(directory, name=f"pool-{directory.name}")
        policy = self._build_policy(
            self.config.simulator_policy or self.config.policy, seed=self.config.seed + 1, side=USER
        )
        policy.load_weights(directory)
        return policy.freeze_for_generation() if hasattr(policy, "freeze_for_generation") else policy

    # ---- rollouts -------------------------------------------------------------------------------

    def collect(
        self, step: int, *, group_size: int, split: str, players: list[dict[str, Any]], salt: int = 0
    ) -> list[Episode]:
        """Plays `len(players)` groups of `group_size` episodes through the env's rollout; group g's
        scenario and players are shared. Everything random is derived from (seed, step, group, salt)."""
        groups = [
            RolloutGroup(derive_seed(self.config.seed, step, group, salt), group_players)
            for group, group_players in enumerate(players)
        ]
        before_turn = (lambda: failpoint("rollout", step + 1)) if salt == 0 else None  # mid-rollout crash point
        play = functools.partial(
            self.rollout, self.make_env, group_size=group_size, split=split, key=(self.config.seed, step, salt)
        )
        if not self.shard_groups:
            return play(groups, before_turn=before_turn)
        # each rank plays every world_size-th group; the seeds are the groups', so the episodes are
        # those of one process playing them all
        ranks = self.data_parallel
        mine = ranks.shard(range(len(groups)))
        episodes = play([groups[g] for g in mine], before_turn=before_turn) if mine else []
        for episode in episodes:
            episode.group = mine[episode.group]
        return sorted(ranks.all_gather(episodes), key=lambda episode: episode.group)

    # ---- rewards and one update ----------------------------------------------------------------------

    def side_rewards(self, side: str, members: list[Episode]) -> np.ndarray:
        """The rewards a learner is trained on, for one group. The simulator's come from the agent's."""
        if side == self.side or not self.cotraining:
            return np.array([e.rewards[side] for e in members])
        agent = np.array([e.rewards[AGENT] for e in members])
        mode = self.config.simulator_reward
        if mode != "curriculum":
            rewards = user_reward_from(agent, mode)
        else:
            penalty = self.config.tool_error_penalty * np.array([e.tool_errors[USER] for e in members])
            rewards = curriculum_reward(agent) - penalty
        # A simulator that broke the protocol keeps the worst reward the env gave it, whatever the mode.
        penalised = np.array([e.end_reason == "error_budget" and "penalty" in e.reward_info[USER] for e in members])
        return np.where(penalised, np.array([e.rewards[USER] for e in members]), rewards)

    def update(
        self, learner: Learner, episodes: list[Episode], groups: list[int], labels: list[str]
    ) -> dict[str, float]:
        """One optimizer step for `learner` on the episodes of `groups` (the ones its policy played);
        `labels[g]` names the opponent of group g (the key of per-simulator baselines)."""
        import torch

        rows: list[tuple[Sample, float]] = []
        zero_variance, rewards_seen, dropped_groups = 0, [], 0
        for group in groups:
            # an episode a policy could not play (an API outage) says nothing about the learner:
            # it never enters the gradient, nor its group's baseline
            members = [e for e in episodes if e.group == group and e.end_reason != FAILED]
            if len(members) < min(self.config.min_group_episodes, self.config.group_size):
                dropped_groups += 1
                continue
            rewards = self.side_rewards(learner.side, members)
            rewards_seen.extend(rewards.tolist())
            zero_variance += int(np.ptp(rewards) == 0)
            values = group_advantages(
                rewards,
                self.advantage_estimator(learner.side),
                key=(learner.side, labels[group]),
                baseline=learner.baseline,
                scale_std=self.config.scale_std,
            )
            for episode, advantage in zip(members, values):
                rows.extend((sample, float(advantage)) for sample in episode.samples.get(learner.side, []))
        summary: dict[str, float] = {"reward_trained": float(np.mean(rewards_seen)) if rewards_seen else float("nan")}
        summary["zero_variance_groups"] = zero_variance / max(len(groups) - dropped_groups, 1)
        summary["dropped_groups"] = dropped_groups
        if not rows:
            return summary
        policy = learner.policy
        policy.model.train()
        learner.optimizer.zero_grad()
        stats: dict[str, list[float]] = {}
        # micro-batch losses are shares of the whole batch's loss: their gradients add up to its gradient
        totals = BatchTotals.of([s.mask for s, _ in rows])
        starts = range(0, len(rows), self.config.micro_batch)
        for start in self.data_parallel.shard(starts) if self.data_parallel is not None else starts:
            chunk = rows[start : start + self.config.micro_batch]
            samples = [s for s, _ in chunk]
            logprobs, mask, entropy = policy.sequence_logprobs(samples)
            sampled = torch.tensor(
                [s.logprobs[1:] + [0.0] * (mask.shape[1] + 1 - len(s.logprobs)) for s in samples],
                device=logprobs.device,
            )
            # One estimator whatever the engine: the "old" log-probs are the training forward's own
            # (before this update), and the gap to the log-probs the tokens were sampled with (a
            # KV-cached loop's or vLLM's, in their precision) is the truncated importance weight's.
            old, behaviour = logprobs.detach(), sampled
            advantages = torch.tensor([[a] for _, a in chunk], device=logprobs.device).expand_as(logprobs)
            reference = policy.reference_logprobs(samples) if learner.loss_config.kl_coef > 0 else None
            loss, chunk_stats = policy_loss(
                logprobs,
                old,
                advantages,
                mask,
                learner.loss_config,
                ref_logprobs=reference,
                behaviour_logprobs=behaviour,
                totals=totals,
            )
            loss.backward()
            chunk_stats["entropy"] = float((entropy * mask).sum() / mask.sum().clamp(min=1))
            chunk_stats["loss"] = float(loss.detach())
            for name, value in chunk_stats.items():
                stats.setdefault(name, []).append(value)
        if self.data_parallel is not None:  # the micro-batches' gradients of every rank, summed
            self.data_parallel.all_reduce_gradients(policy.trainable_parameters())
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), self.config.grad_clip)
        learner.optimizer.step()
        if policy.engine is not None:
            policy.engine.sync(policy)
        summary.update(
            {name: float(np.mean(values)) for name, values in stats.items() if name not in {"tokens", "loss"}}
        )
        # the step's loss: the sum of the micro-batches' shares
        loss = float(np.sum(stats.get("loss", [])))
        loss = self.data_parallel.all_reduce_sum(loss) if self.data_parallel is not None else loss
        summary.update(loss=loss, grad_norm=float(grad_norm), trained_tokens=totals.tokens)
        return summary

    def advantage_estimator(self, side: str) -> str:
        """The co-trained simulator's curriculum reward is one number per group (a function of
        the group's reward variance), so a group baseline would zero its advantages: it is
        compared with a running baseline across groups instead."""
        if side != self.side and self.cotraining and self.config.simulator_reward == "curriculum":
            return "rae"
        return self.config.advantage

    # ---- evaluation --------------------------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """Held-out success: test-split scenarios against each evaluation simulator. The scenarios
        and sampling seeds are the same at every evaluation of a run, so its points are comparable."""
        results: dict[str, float] = {}
        successes = []
        policy = self.learners[self.side].policy
        for spec in self.config.eval_simulators:
            partner = make_policy(spec, env=self.probe, side=self.partner_side)
            players = [{self.side: policy, self.partner_side: partner}] * self.config.eval_tasks
            episodes = self.collect(0, group_size=self.config.eval_samples, split="test", players=players, salt=1)
            results[f"heldout_success/{spec}"] = float(np.mean([e.success(self.side) for e in episodes]))
            successes.extend(e.success(self.side) for e in episodes)
        results["heldout_success"] = float(np.mean(successes)) if successes else float("nan")
        return results

    # ---- the loop ------------------------------------------------------------------------------------

    def run(
        self,
        *,
        resume: bool = False,
        overwrite: bool = True,
        progress: bool = True,
        on_step: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Trains up to `config.steps`: from the newest intact checkpoint with `resume`, else from
        step 0 (also when there is nothing to resume from). A fresh start first deletes what an
        earlier run left in the folder; with `overwrite=False` (`scope train` without `--overwrite`)
        it refuses when that is another run's work instead; see `start_fresh`."""
        if not self.writer:
            return self._follow(on_step)
        if not (resume and self.resume()):
            self.start_fresh(overwrite=overwrite or resume)
        (self.output / "config.yaml").write_text(dump_config(self.config))
        if self.data_parallel is not None:  # the other ranks start from what this one loaded
            self.data_parallel.broadcast(self.step)
        from tqdm.auto import tqdm

        log = MetricsLog(
            self.output,
            tensorboard=self.config.tensorboard,
            wandb=self.config.wandb,
            wandb_project=self.config.wandb_project,
            wandb_mode=self.config.wandb_mode,
            config=asdict(self.config),
        )
        bar = tqdm(total=self.config.steps, initial=self.step, desc="train", unit="step", disable=not progress)
        try:
            while self.step < self.config.steps:
                record = self.advance(log.write)
                if on_step is not None:
                    on_step(record)
                bar.update(1)
                bar.set_postfix(
                    reward=f"{record['reward_mean']:.3f}", entropy=f"{record.get('entropy', float('nan')):.2f}"
                )
        finally:  # a run stopped by an error still flushes its logs
            bar.close()
            log.close()
        history = read_metrics(self.metrics_path)
        plot_curves(history, self.output)
        return history

    def _follow(self, on_step: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
        """A rank other than 0: starts from the checkpoint rank 0 resumed from (or from scratch),
        then takes every step with it, writing nothing."""
        step = self.data_parallel.broadcast(None)
        if step:
            directory = checkpoint_steps(self.checkpoints).get(step)
            if directory is None:
                raise RunError(
                    f"rank {self.data_parallel.rank} does not see the checkpoint of step {step} in "
                    f"{self.checkpoints}: the output folder must be on storage every node of the group sees"
                )
            problem = self._load_checkpoint(directory)
            if problem is not None:
                raise NoIntactCheckpoint(f"rank {self.data_parallel.rank}: {directory.name} {problem}")
        if self.pool is not None:
            self.pool.refresh()
        while self.step < self.config.steps:
            record = self.advance(lambda record, durable: None)
            if on_step is not None:
                on_step(record)
        return []

    def advance(self, write: Callable[..., None]) -> dict[str, Any]:
        """One training step, then what is due after it (a pool snapshot, evaluation, its metrics
        line through `write`, a checkpoint)."""
        from baselines.people.episode_store import record_episodes

        # a sample of the step's episodes, saved beside its metrics
        with record_episodes(self) if self.writer else contextlib.nullcontext():
            record = self.train_step(self.step)
        self.step += 1
        if self.pool is not None and self.step % self.config.pool_every == 0:
            if self.writer:
                self.pool.add(self.learners[USER].policy.save, step=self.step)
            if self.data_parallel is not None:  # every rank draws from the pool rank 0 now has
                self.data_parallel.barrier()
                if not self.writer:
                    self.pool.refresh()
        if self.step % self.config.eval_every == 0 or self.step == self.config.steps:
            record.update(self.evaluate(self.step))
        checkpoint = self.writer and (self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps)
        if checkpoint:
            record["disk_mb"] = disk_megabytes(self.output)
        # Metrics before the checkpoint: a crash in between replays this step (resume drops metrics
        # past the checkpoint) instead of losing its line.
        write(record, durable=checkpoint)
        if checkpoint:
            self.save()
        return record

    def start_fresh(self, *, overwrite: bool = True) -> None:
        """Clears what an earlier run left in the output folder, so nothing of it mixes with this one.
        Without `overwrite`, refuses (`OutputInUse`) when that is the checkpoints or metrics of
        another run; one of the very same config is restarted all the same."""
        recorded = self.output / "config.yaml"
        same_run = recorded.is_file() and recorded.read_text() == dump_config(self.config)
        if self._earlier_work and not (overwrite or same_run):
            raise OutputInUse(
                f"{self.output} holds another run ({self._earlier_work}) with a different config: "
                "--resume continues it, --overwrite deletes it and starts this one, or choose another output_dir"
            )
        for name in RUN_FILES:
            remove_path(self.output / name)
        if self._earlier_pool:  # the earlier run's pool, perhaps of another model: this run starts its own
            self._replace_pool()
        self._earlier_work, self._earlier_pool = None, False

    def _replace_pool(self) -> None:
        remove_path(self.output / "sim_pool")
        self.pool = self._make_pool()
        if self.pool is not None:
            self._seed_pool()
            self.opponents = self._opponents()

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        groups = self.config.groups_per_step
        players, labels = self.players(step, groups)
        episodes = self.collect(step, group_size=self.config.group_size, split="train", players=players)
        rollout_time = time.perf_counter() - started
        failed_share = self._check_failed_episodes(step, episodes)
        rewards = np.array([e.rewards[self.side] for e in episodes])
        record: dict[str, Any] = {
            "step": step + 1,
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "success": float(np.mean([e.success(self.side) for e in episodes])),
            "turns": float(np.mean([e.turns for e in episodes])),
            "generated_tokens_per_s": sum(e.generated_tokens for e in episodes) / max(rollout_time, 1e-9),
            "failed_episode_share": failed_share,
            "failed_episodes": sum(e.end_reason == FAILED for e in episodes),
        }
        for side, learner in self.learners.items():
            own_groups = [g for g in range(groups) if players[g][side] is learner.policy]
            stats = self.update(learner, episodes, own_groups, labels)
            failpoint(f"update_{side}", step + 1)
            prefix = "" if side == self.side else "simulator/"
            record.update(
                {
                    f"{prefix}{name}": value
                    for name, value in stats.items()
                    if not (prefix == "" and name == "reward_trained")
                }
            )
        if self.pool is not None:
            for label in sorted(set(labels)):
                played = [e.rewards[AGENT] for e in episodes if labels[e.group] == label]
                record[f"pool/agent_reward/{label}"] = float(np.mean(played))
            record["pool/live_share"] = labels.count(LIVE) / len(labels)
            record["pool/size"] = len(self.pool.members)
            record["pool/age_mean"] = float(np.mean(self.pool.ages(step + 1)))
            self.pool.release()
        record["step_time"] = time.perf_counter() - started
        return record

    def _check_failed_episodes(self, step: int, episodes: list[Episode]) -> float:
        """The share of episodes a policy could not play (`policy_error`); too many stop the run
        before it trains on them: a broken simulator must not pass for a reward of 0."""
        failed = sum(e.end_reason == FAILED for e in episodes)
        share = failed / max(len(episodes), 1)
        if share > self.config.max_failed_episode_share:
            raise TooManyFailedEpisodes(
                f"step {step + 1}: {failed} of {len(episodes)} training episodes ended in policy_error (a policy "
                f"could not reply), more than max_failed_episode_share={self.config.max_failed_episode_share}; "
                "the run stops before training on them. Check the simulators (their server, key, model); "
                "--resume continues from the last checkpoint"
            )
        return share

    # ---- checkpoints -----------------------------------------------------------------------------------

    def save(self) -> Path:
        """An atomic checkpoint of everything the next step depends on; keeps the last few."""
        import torch

        self.checkpoints.mkdir(exist_ok=True)
        final = self.checkpoints / f"step-{self.step:06d}"
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=self.checkpoints))
        for side, learner in self.learners.items():
            learner.policy.save(staging / side / "policy")
            torch.save(learner.optimizer.state_dict(), staging / side / "optimizer.pt")
        torch.save(torch.get_rng_state(), staging / "torch_rng.pt")
        if torch.cuda.is_available():  # dropout on the GPU draws from CUDA's generators
            torch.save(torch.cuda.get_rng_state_all(), staging / "cuda_rng.pt")
        baselines = {
            side: [[list(k), v] for k, v in learner.baseline.values.items()] for side, learner in self.learners.items()
        }
        state = {"step": self.step, "baselines": baselines, "config": asdict(self.config)}
        (staging / "state.json").write_text(json.dumps(state))
        write_checkpoint_manifest(staging, self.step)
        failpoint("checkpoint", self.step)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        fsync_directory(self.checkpoints)
        atomic_write(self.checkpoints / "latest", final.name)
        if self.pool is not None:  # members evicted up to now are no longer needed to resume
            self.pool.purge_evicted(self.step)
        self._prune_checkpoints()
        return final

    def _prune_checkpoints(self) -> None:
        """Keeps the `keep_checkpoints` newest checkpoints up to this step, ordered by step (never by
        name), and drops later ones: what is left of the steps a resume from an older one replays."""
        steps = checkpoint_steps(self.checkpoints)
        kept = sorted(step for step in steps if step <= self.step)[-self.config.keep_checkpoints :]
        for step, directory in steps.items():
            if step not in kept:
                shutil.rmtree(directory)

    def resume(self) -> bool:
        """Continues from the newest intact checkpoint (see `load_latest`), with a warning when newer
        ones are damaged; False when there is none at all. Later metrics and pool members are dropped."""
        for stale in self.checkpoints.glob(".step-*"):  # a checkpoint being written when the run died
            shutil.rmtree(stale, ignore_errors=True)
        loaded = self.load_latest()
        if loaded is None:
            return False
        directory, damaged = loaded
        self._continue_from(directory, damaged)
        return True

    def load_latest(self) -> tuple[Path, list[str]] | None:
        """Loads the newest intact checkpoint (checked against its manifest, then loaded) and
        changes nothing on disk, so a run can be evaluated while it trains: that checkpoint's
        folder and what is wrong with newer ones, or None when there is no checkpoint at all."""
        steps = checkpoint_steps(self.checkpoints)
        if not steps:
            return None
        problems = self._latest_pointer_problems(steps)
        for step in sorted(steps, reverse=True):
            problem = verify_checkpoint(steps[step]) or self._load_checkpoint(steps[step])
            if problem is None:
                if problems:
                    warnings.warn(
                        f"using {steps[step].name}, the newest intact checkpoint; damaged: {'; '.join(problems)}",
                        stacklevel=3,
                    )
                return steps[step], problems
            problems.append(f"{steps[step].name}: {problem}")
        raise NoIntactCheckpoint(
            f"no intact checkpoint in {self.checkpoints} to resume from ({'; '.join(problems)}); "
            "restore one, or start over with --overwrite"
        )

    def _latest_pointer_problems(self, steps: dict[int, Path]) -> list[str]:
        """A `latest` that names a checkpoint no longer there (reported with the damaged ones)."""
        pointer = self.checkpoints / "latest"
        named = pointer.read_text().strip() if pointer.is_file() else ""
        present = {directory.name for directory in steps.values()}
        return [f"{named} (named by 'latest'): missing"] if named and named not in present else []

    def _load_checkpoint(self, directory: Path) -> str | None:
        """Loads a checkpoint into the learners; what went wrong, or None. A later candidate
        overwrites everything a failed one loaded part of."""
        import torch

        try:
            state = json.loads((directory / "state.json").read_text())
            for side, learner in self.learners.items():
                learner.policy.load_weights(directory / side / "policy")
                learner.optimizer.load_state_dict(torch.load(directory / side / "optimizer.pt", weights_only=True))
                learner.baseline.values = {tuple(k): v for k, v in state["baselines"].get(side, [])}
            torch.set_rng_state(torch.load(directory / "torch_rng.pt", weights_only=True))
            if torch.cuda.is_available() and (directory / "cuda_rng.pt").is_file():
                torch.cuda.set_rng_state_all(torch.load(directory / "cuda_rng.pt", weights_only=True))
            self.step = int(state["step"])
            for learner in self.learners.values():  # the generation engine serves the restored weights
                if learner.policy.engine is not None:
                    learner.policy.engine.sync(learner.policy)
        except Exception as error:  # whatever the damage (truncated, wrong shapes, missing keys): not loadable
            return f"cannot be loaded: {type(error).__name__}: {' '.join(str(error).split())[:300]}"
        return None

    def _continue_from(self, directory: Path, damaged: list[str]) -> None:
        if damaged:
            atomic_write(self.checkpoints / "latest", directory.name)
        if self.pool is not None:
            self.pool.drop_after(self.step)
        if self.metrics_path.exists():
            kept = [record for record in read_metrics(self.metrics_path) if record["step"] <= self.step]
            atomic_write(self.metrics_path, "".join(json.dumps(record) + "\n" for record in kept))
