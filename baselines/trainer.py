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
import json
import os
import shutil
import tempfile
import time
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
        self.pool = (
            CheckpointPool(
                self.output / "sim_pool",
                max_size=config.pool_size,
                sampling=config.pool_sampling,
                loader=self._load_snapshot,
                retain_evicted=True,
            )
            if config.method == "population"
            else None
        )
        self._seed_pool()
        self.opponents = self._opponents()
        self.step = 0
        self.metrics_path = self.output / "metrics.jsonl"
        self.checkpoints = self.output / "checkpoints"
        (self.output / "config.yaml").write_text(dump_config(config))

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
            return user_reward_from(agent, mode)
        penalty = self.config.tool_error_penalty * np.array([e.tool_errors[USER] for e in members])
        return curriculum_reward(agent) - penalty

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
        self, *, resume: bool = False, progress: bool = True, on_step: Callable[[dict[str, Any]], None] | None = None
    ) -> list[dict[str, Any]]:
        if not (resume and self.resume()):  # a fresh start, also when there is nothing to resume from
            if self.metrics_path.exists():
                self.metrics_path.unlink()
            if self.pool is not None:  # a pool left by an earlier run: back to the initial simulator only
                self.pool.drop_after(0)
                self._seed_pool()  # the earlier run may have evicted and deleted it
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
        while self.step < self.config.steps:
            record = self.train_step(self.step)
            self.step += 1
            if self.pool is not None and self.step % self.config.pool_every == 0:
                self.pool.add(self.learners[USER].policy.save, step=self.step)
            if self.step % self.config.eval_every == 0 or self.step == self.config.steps:
                record.update(self.evaluate(self.step))
            if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                self.save()
                record["disk_mb"] = disk_megabytes(self.output)
            log.write(record)
            if on_step is not None:
                on_step(record)
            bar.update(1)
            bar.set_postfix(reward=f"{record['reward_mean']:.3f}", entropy=f"{record.get('entropy', float('nan')):.2f}")
        bar.close()
        log.close()
        history = read_metrics(self.metrics_path)
        plot_curves(history, self.output)
        return history

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        groups = self.config.groups_per_step
        players, labels = self.players(step, groups)
        episodes = self.collect(step, group_size=self.config.group_size, split="train", players=players)
        rollout_time = time.perf_counter() - started
        rewards = np.array([e.rewards[self.side] for e in episodes])
        record: dict[str, Any] = {
            "step": step + 1,
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "success": float(np.mean([e.success(self.side) for e in episodes])),
            "turns": float(np.mean([e.turns for e in episodes])),
            "generated_tokens_per_s": sum(e.generated_tokens for e in episodes) / max(rollout_time, 1e-9),
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
        failpoint("checkpoint", self.step)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        _atomic_write(self.checkpoints / "latest", final.name)
        if self.pool is not None:  # members evicted up to now are no longer needed to resume
            self.pool.purge_evicted(self.step)
        for old in sorted(p for p in self.checkpoints.glob("step-*") if p.is_dir())[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)
        return final

    def resume(self) -> bool:
        """Continues from the latest checkpoint, if there is one; later metrics and pool members are dropped."""
        import torch

        pointer = self.checkpoints / "latest"
        if not pointer.exists():
            return False
        directory = self.checkpoints / pointer.read_text().strip()
        for stale in self.checkpoints.glob(".step-*"):  # a checkpoint being written when the run died
            shutil.rmtree(stale, ignore_errors=True)
        state = json.loads((directory / "state.json").read_text())
        for side, learner in self.learners.items():
            learner.policy.load_weights(directory / side / "policy")
            learner.optimizer.load_state_dict(torch.load(directory / side / "optimizer.pt", weights_only=True))
            learner.baseline.values = {tuple(k): v for k, v in state["baselines"].get(side, [])}
        torch.set_rng_state(torch.load(directory / "torch_rng.pt", weights_only=True))
        self.step = int(state["step"])
        if self.pool is not None:
            self.pool.drop_after(self.step)
        if self.metrics_path.exists():
            kept = [
                line for line in self.metrics_path.read_text().splitlines() if json.loads(line)["step"] <= self.step
            ]
            _atomic_write(self.metrics_path, "".join(line + "\n" for line in kept))
        return True


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
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


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
