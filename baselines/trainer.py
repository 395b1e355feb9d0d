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

import copy
import hashlib
import json
import os
import re
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
from baselines.config import TrainConfig, dump_config
from baselines.loss import LossConfig, policy_loss
from baselines.metrics_log import MetricsLog
from baselines.policy import LMPolicy, build_policy, language_model_of
from scope_envs.core.dialogue import AGENT, USER, DialogueEnv, other_side, user_reward_from
from scope_envs.core.failpoints import failpoint
from scope_envs.core.registration import find_env
from scope_envs.core.rollout import Episode, RolloutGroup, Sample, collect_chat
from scope_envs.core.seeding import derive_seed
from scope_envs.core.specs import make_policy
from sims.opponents import Ensemble, Live, Opponents, Population
from sims.pool import CheckpointPool
from sims.verbalized import verbalize

CHECKPOINT_MANIFEST = "manifest.json"  # every file of a checkpoint with its size and SHA-256, written last
# what a run writes into its output folder, besides its simulator pool (`sim_pool`), and a fresh start
# deletes; anything else there, such as vLLM's served adapters or wandb's own folders, is left alone
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
    """One trained model: its policy, optimizer, optional frozen reference, loss and baseline."""

    side: str
    policy: LMPolicy
    optimizer: Any
    loss_config: LossConfig
    reference: Any = None
    baseline: RunningBaseline = field(default_factory=RunningBaseline)


class Trainer:
    def __init__(self, config: TrainConfig) -> None:
        import torch

        self.config = config
        self.output = Path(config.output_dir)
        self.output.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        self.env_info = find_env(config.env)
        self.probe = self.make_env()
        self.rollout = self.env_info.rollout_function() or collect_chat
        self.side, self.partner_side = config.side, other_side(config.side)
        self.cotraining = config.method in {"cotrain", "population"}
        self._engines: dict[str, Any] = {}  # vLLM engines by base model
        self.learners = {
            self.side: self._learner(self.side, config.policy, config.lr, config.kl_coef, seed=config.seed)
        }
        if self.cotraining:
            spec = config.simulator_policy or config.policy
            lr = config.simulator_lr if config.simulator_lr is not None else config.lr
            self.learners[USER] = self._learner(USER, spec, lr, config.simulator_kl_coef, seed=config.seed + 1)
        self.metrics_path = self.output / "metrics.jsonl"
        self.checkpoints = self.output / "checkpoints"
        self._earlier_work = saved_work(self.output)  # before this trainer adds to the folder
        self._earlier_pool = (self.output / "sim_pool").exists()
        self.pool = self._make_pool()
        self._seed_pool()
        self.opponents = self._opponents()
        self.step = 0

    def _learner(self, side: str, spec: str, lr: float, kl_coef: float, *, seed: int) -> Learner:
        import torch

        config = self.config
        policy = build_policy(
            spec,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            device=config.device,
            lora=config.lora,
            seed=seed,
            env=self.probe,
            side=side,
        )
        optimizer = torch.optim.AdamW(
            [p for p in policy.model.parameters() if p.requires_grad], lr=lr, weight_decay=config.weight_decay
        )
        loss_config = LossConfig(
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            kl_coef=kl_coef,
            aggregation=config.aggregation,
            constant_denominator=float(config.group_size * config.max_new_tokens),
        )
        reference = copy.deepcopy(policy.model).eval() if kl_coef > 0 else None
        if config.generation_engine == "vllm":
            policy.engine = self._vllm_engine(spec).handle(side)
            policy.engine.sync(policy.model)
        return Learner(side, policy, optimizer, loss_config, reference, RunningBaseline(decay=config.rae_decay))

    def _opponents(self) -> Opponents:
        """Who plays the side opposite the trained one in each group."""
        config = self.config
        if self.pool is not None:
            return Population(self.pool, self.learners[USER].policy, seed=config.seed)
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
        )

    def _seed_pool(self) -> None:
        """A population's pool starts with the initial simulator (kept if the pool already has it)."""
        if self.pool is not None and not self.pool.members:
            self.pool.add(self.learners[USER].policy.save, step=0, meta={"origin": "initial simulator"})

    def _vllm_engine(self, spec: str) -> Any:
        """The vLLM engine of a base model; co-trained sides of one base share it (two adapters)."""
        base = language_model_of(spec) or spec
        if base not in self._engines:
            from baselines.vllm_engine import VLLMGeneration

            config = self.config
            self._engines[base] = VLLMGeneration(
                base,
                adapter_dir=self.output / "served_adapters",
                temperature=config.temperature,
                max_new_tokens=config.max_new_tokens,
                max_lora_rank=int(config.lora["r"]) if config.lora else 64,
                gpu_memory_utilization=config.vllm_gpu_memory_utilization,
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
        """A pool member as a policy: the simulator's architecture with the member's weights."""
        config = self.config
        policy = build_policy(
            config.simulator_policy or config.policy,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            device=config.device,
            lora=config.lora,
            seed=config.seed + 1,
            env=self.probe,
            side=USER,
        )
        policy.load_weights(directory)
        return policy

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
        return self.rollout(
            self.make_env,
            groups,
            group_size=group_size,
            split=split,
            key=(self.config.seed, step, salt),
            before_turn=before_turn,
        )

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
        zero_variance, rewards_seen = 0, []
        for group in groups:
            members = [e for e in episodes if e.group == group]
            rewards = self.side_rewards(learner.side, members)
            rewards_seen.extend(rewards.tolist())
            zero_variance += int(np.ptp(rewards) == 0)
            values = group_advantages(
                rewards,
                self.config.advantage,
                key=(learner.side, labels[group]),
                baseline=learner.baseline,
                scale_std=self.config.scale_std,
            )
            for episode, advantage in zip(members, values):
                rows.extend((sample, float(advantage)) for sample in episode.samples.get(learner.side, []))
        summary: dict[str, float] = {"reward_trained": float(np.mean(rewards_seen)) if rewards_seen else float("nan")}
        summary["zero_variance_groups"] = zero_variance / max(len(groups), 1)
        if not rows:
            return summary
        policy = learner.policy
        policy.model.train()
        learner.optimizer.zero_grad()
        stats: dict[str, list[float]] = {}
        total_tokens = sum(sum(s.mask) for s, _ in rows) or 1
        for start in range(0, len(rows), self.config.micro_batch):
            chunk = rows[start : start + self.config.micro_batch]
            samples = [s for s, _ in chunk]
            logprobs, mask, entropy = policy.sequence_logprobs(samples)
            sampled = torch.tensor(
                [s.logprobs[1:] + [0.0] * (mask.shape[1] + 1 - len(s.logprobs)) for s in samples],
                device=logprobs.device,
            )
            # With vLLM sampling, the trainer's own log-probs before this update are the "old" ones
            # and vLLM's are the behaviour policy's, corrected for by truncated importance sampling.
            old, behaviour = (logprobs.detach(), sampled) if policy.engine is not None else (sampled, None)
            advantages = torch.tensor([[a] for _, a in chunk], device=logprobs.device).expand_as(logprobs)
            reference = None
            if learner.reference is not None:
                with torch.no_grad():
                    reference = reference_logprobs(policy, learner.reference, samples)
            loss, chunk_stats = policy_loss(
                logprobs,
                old,
                advantages,
                mask,
                learner.loss_config,
                ref_logprobs=reference,
                behaviour_logprobs=behaviour,
            )
            weight = (
                float(mask.sum()) / total_tokens if self.config.aggregation == "token_mean" else len(chunk) / len(rows)
            )
            (loss * weight).backward()
            chunk_stats["entropy"] = float((entropy * mask).sum() / mask.sum().clamp(min=1))
            chunk_stats["loss"] = float(loss.detach())
            for name, value in chunk_stats.items():
                stats.setdefault(name, []).append(value)
        parameters = [p for p in policy.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, self.config.grad_clip)
        learner.optimizer.step()
        if policy.engine is not None:
            policy.engine.sync(policy.model)
        summary.update({name: float(np.mean(values)) for name, values in stats.items() if name != "tokens"})
        summary.update(grad_norm=float(grad_norm), trained_tokens=float(total_tokens))
        return summary

    # ---- evaluation --------------------------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """Held-out success: test-split scenarios against each evaluation simulator."""
        results: dict[str, float] = {}
        successes = []
        policy = self.learners[self.side].policy
        for spec in self.config.eval_simulators:
            partner = make_policy(spec, env=self.probe, side=self.partner_side)
            players = [{self.side: policy, self.partner_side: partner}] * self.config.eval_tasks
            episodes = self.collect(step, group_size=self.config.eval_samples, split="test", players=players, salt=1)
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
        if not (resume and self.resume()):
            self.start_fresh(overwrite=overwrite or resume)
        (self.output / "config.yaml").write_text(dump_config(self.config))
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

    def advance(self, write: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """One training step, then what is due after it (a pool snapshot, evaluation, its metrics
        line through `write`, a checkpoint)."""
        record = self.train_step(self.step)
        self.step += 1
        if self.pool is not None and self.step % self.config.pool_every == 0:
            self.pool.add(self.learners[USER].policy.save, step=self.step)
        if self.step % self.config.eval_every == 0 or self.step == self.config.steps:
            record.update(self.evaluate(self.step))
        checkpoint = self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps
        if checkpoint:
            record["disk_mb"] = disk_megabytes(self.output)
        # Metrics before the checkpoint: a crash in between replays this step (resume drops metrics
        # past the checkpoint) instead of losing its line.
        write(record)
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
            record["pool/size"] = len(self.pool.members)
            record["pool/age_mean"] = float(np.mean(self.pool.ages(step + 1)))
            self.pool.release()
        record["step_time"] = time.perf_counter() - started
        return record

    def _check_failed_episodes(self, step: int, episodes: list[Episode]) -> float:
        """The share of episodes a policy could not play (`policy_error`); too many stop the run
        before it trains on them: a broken simulator must not pass for a reward of 0."""
        failed = sum(e.end_reason == "policy_error" for e in episodes)
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
        _fsync_directory(self.checkpoints)
        _atomic_write(self.checkpoints / "latest", final.name)
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
        """Continues from the newest intact checkpoint (checked against its manifest, then loaded),
        with a warning when newer ones are damaged; False when there is none at all. Later metrics
        and pool members are dropped."""
        for stale in self.checkpoints.glob(".step-*"):  # a checkpoint being written when the run died
            shutil.rmtree(stale, ignore_errors=True)
        steps = checkpoint_steps(self.checkpoints)
        if not steps:
            return False
        problems = self._latest_pointer_problems(steps)
        for step in sorted(steps, reverse=True):
            problem = verify_checkpoint(steps[step]) or self._load_checkpoint(steps[step])
            if problem is None:
                self._continue_from(steps[step], problems)
                return True
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
            self.step = int(state["step"])
        except Exception as error:  # whatever the damage (truncated, wrong shapes, missing keys): not loadable
            return f"cannot be loaded: {type(error).__name__}: {' '.join(str(error).split())[:300]}"
        return None

    def _continue_from(self, directory: Path, damaged: list[str]) -> None:
        if damaged:
            warnings.warn(
                f"resuming from {directory.name}, the newest intact checkpoint; damaged: {'; '.join(damaged)}",
                stacklevel=3,
            )
            _atomic_write(self.checkpoints / "latest", directory.name)
        if self.pool is not None:
            self.pool.drop_after(self.step)
        if self.metrics_path.exists():
            kept = [record for record in read_metrics(self.metrics_path) if record["step"] <= self.step]
            _atomic_write(self.metrics_path, "".join(json.dumps(record) + "\n" for record in kept))


def reference_logprobs(policy: LMPolicy, reference: Any, samples: list[Sample]) -> Any:
    live = policy.model
    policy.model = reference
    try:
        return policy.sequence_logprobs(samples)[0]
    finally:
        policy.model = live


def disk_megabytes(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def _atomic_write(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The metrics records of a run; a line cut short by a crash while it was written is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def saved_work(output: Path) -> str | None:
    """What an earlier run saved in `output` (its checkpoints, its metrics), in words; None if nothing."""
    found = []
    steps = checkpoint_steps(output / "checkpoints")
    if steps:
        found.append(f"checkpoints up to step {max(steps)}")
    records = read_metrics(output / "metrics.jsonl")
    if records:
        found.append(f"metrics of {len(records)} steps")
    return " and ".join(found) or None


def checkpoint_steps(checkpoints: Path) -> dict[int, Path]:
    """The checkpoint directories (`step-000042`) by step."""
    if not checkpoints.is_dir():
        return {}
    matches = ((re.fullmatch(r"step-(\d+)", p.name), p) for p in checkpoints.iterdir() if p.is_dir())
    return {int(match.group(1)): path for match, path in matches if match}


def write_checkpoint_manifest(directory: Path, step: int) -> None:
    """Records every file of a checkpoint with its size and SHA-256 (and flushes each to disk)."""
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        files[path.relative_to(directory).as_posix()] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        _fsync_file(path)  # on disk before the manifest vouches for it
    manifest = directory / CHECKPOINT_MANIFEST
    manifest.write_text(json.dumps({"version": 1, "step": step, "files": files}, indent=1))
    _fsync_file(manifest)


def verify_checkpoint(directory: Path) -> str | None:
    """What is wrong with a checkpoint against its manifest (a missing, truncated or changed file), or None."""
    try:
        files = json.loads((directory / CHECKPOINT_MANIFEST).read_text())["files"]
        expected = {name: (int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()}
    except FileNotFoundError:
        return f"no {CHECKPOINT_MANIFEST} (damaged, or written by a version without checksums)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"unreadable {CHECKPOINT_MANIFEST} ({type(error).__name__})"
    for name, (size, digest) in expected.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {size}"
        if _sha256(path) != digest:
            return f"{name} does not match its checksum"
    return None


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _fsync_directory(path: Path) -> None:
    """Makes a rename inside `path` survive a power loss (where the OS allows opening directories)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def plot_curves(history: list[dict[str, Any]], output: Path) -> list[Path]:
    """Training reward vs held-out success, and policy entropy, over steps."""
    if not history:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in history]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(steps, [r["reward_mean"] for r in history], label="training reward")
    evaluated = [r for r in history if "heldout_success" in r]
    left.plot([r["step"] for r in evaluated], [r["heldout_success"] for r in evaluated], "o-", label="held-out success")
    left.set_xlabel("step")
    left.legend()
    right.plot(steps, [r.get("entropy", float("nan")) for r in history], color="tab:purple", label="agent")
    if any("simulator/entropy" in r for r in history):
        right.plot(
            steps, [r.get("simulator/entropy", float("nan")) for r in history], color="tab:orange", label="simulator"
        )
        right.legend()
    right.set_xlabel("step")
    right.set_title("policy token entropy")
    figure.tight_layout()
    path = output / "curves.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return [path]
