"""The multi-turn GRPO trainer: one loop that runs any training method (`baselines.training.methods`).

Read top to bottom: `players` says who plays each group (the learners, and the opponents of
`sims.opponents`); `collect` plays the groups through the env's rollout (`scope_envs.core.rollout`:
chat episodes, or the benchmark's own vectorized rollout), every episode stepped together and each
trainable model's turns generated in batches, token-in token-out; `update` turns each group's
rewards into advantages and takes one optimizer step per learner on the clipped policy-gradient
loss; `evaluate` measures held-out success against simulators never trained against; `save` /
`resume` make a killed run continue exactly. Everything random in a step is derived from (seed,
step), so a resumed run replays the same scenarios, samples and pool draws.

The method of a config (`method_for(config)`) says which sides train, who plays the other side
of each group, each learner's rewards and advantage estimator, and what happens after a step:
`single`, `ensemble` and `vs` train one side against frozen simulators; `cotrain` and `curriculum`
also train the simulator; `population` draws each group's simulator from a pool of its snapshots.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from baselines.distributed.data_parallel import DataParallel
from baselines.training.advantages import RunningBaseline, group_advantages
from baselines.training.checkpoints import (
    atomic_write,
    checkpoint_steps,
    disk_megabytes,
    fsync_directory,
    read_metrics,
    remove_path,
    saved_work,
    write_checkpoint_manifest,
)
from baselines.training.config import RESUMABLE_CHANGES, TrainConfig, dump_config, resume_changes, saved_values
from baselines.training.curves import plot_curves
from baselines.training.episodes import EpisodeSaver, observed
from baselines.training.loss import BatchTotals, LossConfig, policy_loss
from baselines.training.methods import Method, method_for
from baselines.training.metrics_log import MetricsLog
from baselines.training.policy import TrainablePolicy, language_model_of
from baselines.training.rollouts import EVALUATION_SALT, heldout_success, local_rollout, rollout_groups
from baselines.training.run import CONFIG_FILE, POOL_FOLDER, RUN_FILES, NoIntactCheckpoint, Run, RunError
from scope_envs.core.dialogue import DialogueEnv, other_side
from scope_envs.core.failpoints import failpoint
from scope_envs.core.registration import find_env
from scope_envs.core.rollout import Episode, Sample
from scope_envs.core.specs import make_policy
from sims.opponents import Opponents
from sims.pool import DamagedSnapshot

# the end of an episode a policy could not play (its API failed after its retries): never trained on
FAILED = "policy_error"


class OutputInUse(RunError):
    """A fresh run into a folder that holds the checkpoints or metrics of another run."""


class ConfigChanged(RunError):
    """A resume whose config changes what the run's steps compute (see `RESUMABLE_CHANGES`)."""


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
        self.folder = Run(self.output, config)  # the run folder this trainer writes
        torch.manual_seed(config.seed)
        self.folder.use_cpu_threads()
        self.env_info = find_env(config.env)
        self.probe = self.make_env()
        # a benchmark's own rollout steps all its groups as arrays: every rank replays it whole
        self.shard_groups = data_parallel is not None and self.env_info.rollout_function() is None
        # training rollouts keep each episode's conversation when episodes are saved (`baselines.training.episodes`)
        self.saving_episodes = config.save_episodes > 0
        chat = self.env_info.rollout_function() is None
        self.rollout = local_rollout(config, self.env_info)
        self.observed_rollout = observed(self.rollout, chat=chat)
        self.train_rollout = self.observed_rollout if self.saving_episodes else self.rollout
        if config.ray_address and data_parallel is None:
            self.rollout = self.train_rollout = self._ray_rollout(self.train_rollout)
        self.side, self.partner_side = config.side, other_side(config.side)
        self.method: Method = method_for(config)
        self._engines: dict[str, Any] = {}  # vLLM engines by base model
        self.learners: dict[str, Learner] = {}
        for side, spec in self.method.learners().items():
            # two LoRA adapters of one model share ONE frozen base
            first = next(iter(self.learners.values()), None)
            shared = first.policy if first is not None and config.lora and spec.policy == config.policy else None
            self.learners[side] = self._learner(
                side, spec.policy, spec.lr, spec.kl_coef, seed=config.seed + spec.seed_offset, base=shared
            )
        self.metrics_path = self.folder.metrics_path
        self.checkpoints = self.folder.checkpoints
        self._earlier_work = saved_work(self.output)  # before this trainer adds to the folder
        self._earlier_pool = (self.output / POOL_FOLDER).exists()
        self.method.start(self)
        self.opponents: Opponents = self.method.opponents(self)
        self.episode_saver = EpisodeSaver(
            self.output,
            env=self.env_info.name,
            seed=config.seed,
            count=config.save_episodes,
            trained=list(self.learners),
            spec_of=self.method.opponent_spec,
            method=config.method,
        )
        self._last_episodes: tuple[list[Episode], list[str]] = ([], [])
        self.step = 0

    @property
    def pool(self) -> Any:
        """The method's simulator pool (a population's), or None."""
        return getattr(self.method, "pool", None)

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
            observe=self.saving_episodes,
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
        return self.folder.build_policy(side, spec, seed=seed, env=self.probe)

    def _vllm_engine(self, spec: str) -> Any:
        """The vLLM engine of a base model; co-trained sides of one base share it (two adapters)."""
        base = language_model_of(spec) or spec
        if base not in self._engines:
            from baselines.training.vllm_engine import VLLMGeneration

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
            try:
                label, opponent = self.opponents.pick(step, group)
            except DamagedSnapshot as error:
                raise RunError(f"{error}; restore it, or start over with --overwrite") from None
            players.append(
                {**{side: learner.policy for side, learner in self.learners.items()}, self.partner_side: opponent}
            )
            labels.append(label)
        return players, labels

    # ---- rollouts -------------------------------------------------------------------------------

    def collect(
        self, step: int, *, group_size: int, split: str, players: list[dict[str, Any]], salt: int = 0
    ) -> list[Episode]:
        """Plays `len(players)` groups of `group_size` episodes through the env's rollout; group g's
        scenario and players are shared. Everything random is derived from (seed, step, group, salt)."""
        groups = rollout_groups(self.config.seed, step, players, salt)
        before_turn = (lambda: failpoint("rollout", step + 1)) if salt == 0 else None  # mid-rollout crash point
        rollout = self.train_rollout if salt == 0 else self.rollout
        play = functools.partial(
            rollout, self.make_env, group_size=group_size, split=split, key=(self.config.seed, step, salt)
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
        """The rewards a learner is trained on, for one group (the method's)."""
        return self.method.rewards(side, members)

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
        # a learner that played no group this step (a population's live simulator while a snapshot
        # plays the batch) trained on nothing: no reward to report, rather than a NaN in the log
        summary: dict[str, float] = {"reward_trained": float(np.mean(rewards_seen))} if rewards_seen else {}
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
                dtype=logprobs.dtype,
            )
            # One estimator whatever the engine: the "old" log-probs are the training forward's own
            # (before this update), and the gap to the log-probs the tokens were sampled with (a
            # KV-cached loop's or vLLM's, in their precision) is the truncated importance weight's.
            old, behaviour = logprobs.detach(), sampled
            advantages = torch.tensor([[a] for _, a in chunk], device=logprobs.device, dtype=logprobs.dtype)
            advantages = advantages.expand_as(logprobs)
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
        return self.method.advantage_estimator(side)

    # ---- evaluation --------------------------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """Held-out success: test-split scenarios against each evaluation simulator. The scenarios
        and sampling seeds are the same at every evaluation of a run, so its points are comparable."""

        def play(players: list[dict[str, Any]], group_size: int) -> list[Episode]:
            return self.collect(0, group_size=group_size, split="test", players=players, salt=EVALUATION_SALT)

        def partner(spec: str) -> Any:
            return make_policy(spec, env=self.probe, side=self.partner_side)

        return heldout_success(self.config, self.learners[self.side].policy, partner, play)

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
        atomic_write(self.output / CONFIG_FILE, dump_config(self.config))
        if self.data_parallel is not None:  # the other ranks start from what this one loaded
            self.data_parallel.broadcast(self.step)
        from tqdm.auto import tqdm

        log = MetricsLog(
            self.output,
            tensorboard=self.config.tensorboard,
            wandb=self.config.wandb,
            wandb_project=self.config.wandb_project,
            wandb_mode=self.config.wandb_mode,
            config=saved_values(self.config),
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
        self.method.following(self)
        while self.step < self.config.steps:
            record = self.advance(lambda record, durable: None)
            if on_step is not None:
                on_step(record)
        return []

    def advance(self, write: Callable[..., None]) -> dict[str, Any]:
        """One training step, then what is due after it (a pool snapshot, evaluation, its metrics
        line through `write`, a checkpoint)."""
        record = self.train_step(self.step)
        if self.writer and self.saving_episodes:  # a sample of the step's episodes, saved beside its metrics
            self.episode_saver.save(self.step, *self._last_episodes)
        self._last_episodes = ([], [])
        self.step += 1
        self.method.after_step(self, self.step)
        every = self.config.eval_every  # 0: no evaluation
        if every and (self.step % every == 0 or self.step == self.config.steps):
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
        recorded = self.output / CONFIG_FILE
        same_run = recorded.is_file() and recorded.read_text() == dump_config(self.config)
        if self._earlier_work and not (overwrite or same_run):
            raise OutputInUse(
                f"{self.output} holds another run ({self._earlier_work}) with a different config: "
                "--resume continues it, --overwrite deletes it and starts this one, or choose another output_dir"
            )
        for name in RUN_FILES:
            remove_path(self.output / name)
        if self._earlier_pool:  # the earlier run's pool, perhaps of another model: this run starts its own
            remove_path(self.output / POOL_FOLDER)
        self.method.start_fresh(self)
        self._earlier_work, self._earlier_pool = None, False

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        groups = self.config.groups_per_step
        players, labels = self.players(step, groups)
        episodes = self.collect(step, group_size=self.config.group_size, split="train", players=players)
        self._last_episodes = (episodes, labels)
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
        record.update(self.method.step_metrics(self, step, labels, episodes))
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
        state = {"step": self.step, "baselines": baselines, "config": saved_values(self.config)}
        if self.pool is not None:  # what a resume from this checkpoint must restore
            state["pool"] = [member.id for member in self.pool.members]
        (staging / "state.json").write_text(json.dumps(state))
        write_checkpoint_manifest(staging, self.step)
        failpoint("checkpoint", self.step)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        fsync_directory(self.checkpoints)
        self.folder.point_latest(final)
        self.folder.prune(self.step, self.config.keep_checkpoints)
        self.method.saved(self, self.step)
        return final

    def resume(self) -> bool:
        """Continues from the newest intact checkpoint (see `load_latest`), with a warning when newer
        ones are damaged; False when there is none at all. Later metrics and pool members are dropped.
        A config that changes what the steps so far computed is refused first (`ConfigChanged`)."""
        if self.folder.checkpoint_steps():
            self._refuse_config_changes()
        for stale in self.checkpoints.glob(".step-*"):  # a checkpoint being written when the run died
            shutil.rmtree(stale, ignore_errors=True)
        loaded = self.load_latest()
        if loaded is None:
            return False
        directory, damaged = loaded
        self._continue_from(directory, damaged)
        return True

    def _refuse_config_changes(self) -> None:
        recorded = self.folder.recorded_config()
        changes = resume_changes(recorded, self.config) if recorded is not None else {}
        if changes:
            listed = "; ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())
            raise ConfigChanged(
                f"--resume would change what the run computes ({listed}): its steps so far ran with the "
                f"values in {self.output / CONFIG_FILE}. Resume with those, or train this config in another "
                f"output_dir or with --overwrite. A resume may change only {', '.join(RESUMABLE_CHANGES)}"
            )

    def load_latest(self) -> tuple[Path, list[str]] | None:
        """Loads the newest intact checkpoint (checked against its manifest, then loaded) and
        changes nothing on disk, so a run can be evaluated while it trains: that checkpoint's
        folder and what is wrong with newer ones, or None when there is no checkpoint at all."""
        return self.folder.newest_intact(self._load_checkpoint)

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
            self.folder.point_latest(directory)
        self.method.resumed(self, self.step)
        self.folder.keep_metrics_up_to(self.step)
