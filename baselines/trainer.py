"""The multi-turn GRPO trainer: one loop, the methods are configurations of it.

Read top to bottom: `collect` plays `groups_per_step` groups of `group_size` episodes (one
scenario and one simulator per group) with every episode stepped together and the trained side's
turns generated in batches, token-in token-out; `update` turns each group's rewards into
advantages and takes one optimizer step on the clipped policy-gradient loss; `evaluate` measures
held-out success against simulators never trained against; `save` / `resume` make a killed run
continue exactly. Everything random in a step is derived from (seed, step), so a resumed run
replays the same scenarios and samples.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from baselines.advantages import RunningBaseline, group_advantages
from baselines.config import TrainConfig, dump_config
from baselines.loss import LossConfig, policy_loss
from baselines.metrics_log import MetricsLog
from baselines.policy import LMPolicy, build_policy
from baselines.traces import Sample, SideTrace
from scope_envs.core.batch import DialogueBatch, respond_all
from scope_envs.core.dialogue import SIDES, DialogueEnv, other_side
from scope_envs.core.policy import PolicyError, import_object
from scope_envs.core.registration import REGISTERED
from sims.ensemble import Ensemble
from sims.registry import make_simulator
from sims.verbalized import VerbalizedSampling


@dataclass
class Episode:
    group: int
    scenario_id: str
    reward: float
    success: bool
    end_reason: str
    turns: int
    samples: list[Sample]
    generated_tokens: int


def derive_seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] % (2**31 - 1))


def is_success(reward: float, reward_info: dict[str, Any]) -> bool:
    components = reward_info.get("components", {})
    return bool(components["success"] > 0) if "success" in components else reward >= 1.0 - 1e-9


class Trainer:
    def __init__(self, config: TrainConfig) -> None:
        import torch

        self.config = config
        self.output = Path(config.output_dir)
        self.output.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        import scope_envs  # noqa: F401  (registers the environments)

        if config.env not in REGISTERED:
            raise ValueError(f"unknown env {config.env!r}; registered: {', '.join(REGISTERED)}")
        self.env_class = import_object(REGISTERED[config.env].entry_point)
        self.probe = self.make_env()
        self.side, self.partner_side = config.side, other_side(config.side)
        self.policy: LMPolicy = build_policy(
            config.policy,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            device=config.device,
            lora=config.lora,
            seed=config.seed,
        )
        parameters = [p for p in self.policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)
        self.reference = copy.deepcopy(self.policy.model).eval() if config.kl_coef > 0 else None
        partners = [make_simulator(spec, env=self.probe, side=self.partner_side) for spec in config.simulators]
        if config.method == "vs":
            partners = [VerbalizedSampling(p, k=config.vs_k, draw=config.vs_draw) for p in partners]
        self.partners = Ensemble(partners, mode="round_robin")
        self.baseline = RunningBaseline(decay=config.rae_decay)
        self.loss_config = LossConfig(
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            kl_coef=config.kl_coef,
            aggregation=config.aggregation,
            constant_denominator=float(config.group_size * config.max_new_tokens),
        )
        self.step = 0
        self.metrics_path = self.output / "metrics.jsonl"
        self.checkpoints = self.output / "checkpoints"
        (self.output / "config.yaml").write_text(dump_config(config))

    def make_env(self) -> DialogueEnv:
        return self.env_class(**self.config.env_kwargs)

    # ---- rollouts -------------------------------------------------------------------------------

    def collect(
        self, step: int, *, groups: int, group_size: int, split: str, partners: list[Any], training: bool
    ) -> list[Episode]:
        """Plays `groups` x `group_size` episodes; group g's scenario and simulator are shared."""
        seeds, options, group_of = [], [], []
        for group in range(groups):
            group_seed = derive_seed(self.config.seed, step, group, 0 if training else 1)
            scenario = self.probe.reset(seed=group_seed, options={"split": split})[1]["agent"]["scenario_id"]
            for member in range(group_size):
                seeds.append(derive_seed(group_seed, member))
                options.append({"task_id": scenario})
                group_of.append(group)
        envs = [self.make_env() for _ in seeds]
        batch = DialogueBatch(envs)
        batch.reset(seeds=seeds, options=options)
        traces = [SideTrace(self.policy.tokenizer, self.policy.stop_ids) for _ in envs]
        generated = [0] * len(envs)
        while not batch.done:
            for side in SIDES:
                pending = batch.pending(side)
                if not pending:
                    continue
                if side == self.side:
                    prompts = [traces[p.index].next_prompt(p.messages, p.tools) for p in pending]
                    replies = self.policy.generate(prompts, [p.seed for p in pending])
                    for p, reply in zip(pending, replies):
                        batch.step(side, {p.index: reply})
                        traces[p.index].record(
                            reply.token_ids or [], reply.logprobs or [], len(batch.view(p.index, side))
                        )
                        generated[p.index] += len(reply.token_ids or [])
                    continue
                for partner_index in sorted({group_of[p.index] for p in pending}):
                    members = [p for p in pending if group_of[p.index] == partner_index]
                    replies = respond_all(partners[partner_index % len(partners)], members)
                    for index, reply in replies.items():
                        if isinstance(reply, PolicyError):
                            batch.fail(index, str(reply))
                        else:
                            batch.step(side, {index: reply})
        episodes = []
        for index, result in enumerate(batch.results):
            assert result is not None
            reward = result.rewards[self.side]
            episodes.append(
                Episode(
                    group=group_of[index],
                    scenario_id=result.scenario_id,
                    reward=reward,
                    success=is_success(reward, result.reward_info[self.side]),
                    end_reason=result.end_reason,
                    turns=result.turns,
                    samples=traces[index].samples() if training else [],
                    generated_tokens=generated[index],
                )
            )
        return episodes

    # ---- one update ------------------------------------------------------------------------------

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        import torch

        advantages: list[float] = []
        rows: list[tuple[Sample, float]] = []
        zero_variance = 0
        for group in sorted({e.group for e in episodes}):
            members = [e for e in episodes if e.group == group]
            rewards = np.array([e.reward for e in members])
            zero_variance += int(np.ptp(rewards) == 0)
            key = (self.side, self.partners.index_for(group))
            values = group_advantages(
                rewards, self.config.advantage, key=key, baseline=self.baseline, scale_std=self.config.scale_std
            )
            for episode, advantage in zip(members, values):
                advantages.append(float(advantage))
                rows.extend((sample, float(advantage)) for sample in episode.samples)
        self.policy.model.train()
        self.optimizer.zero_grad()
        stats: dict[str, list[float]] = {}
        total_tokens = sum(sum(s.mask) for s, _ in rows) or 1
        for start in range(0, len(rows), self.config.micro_batch):
            chunk = rows[start : start + self.config.micro_batch]
            samples = [s for s, _ in chunk]
            logprobs, mask, entropy = self.policy.sequence_logprobs(samples)
            old = torch.tensor(
                [s.logprobs[1:] + [0.0] * (mask.shape[1] + 1 - len(s.logprobs)) for s in samples],
                device=logprobs.device,
            )
            adv = torch.tensor([[a] for _, a in chunk], device=logprobs.device).expand_as(logprobs)
            ref = None
            if self.reference is not None:
                with torch.no_grad():
                    ref = self._reference_logprobs(samples)
            loss, chunk_stats = policy_loss(logprobs, old, adv, mask, self.loss_config, ref_logprobs=ref)
            weight = (
                float(mask.sum()) / total_tokens if self.config.aggregation == "token_mean" else len(chunk) / len(rows)
            )
            (loss * weight).backward()
            chunk_stats["entropy"] = float((entropy * mask).sum() / mask.sum().clamp(min=1))
            chunk_stats["loss"] = float(loss)
            for name, value in chunk_stats.items():
                stats.setdefault(name, []).append(value)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.policy.model.parameters() if p.requires_grad], self.config.grad_clip
        )
        self.optimizer.step()
        summary = {name: float(np.mean(values)) for name, values in stats.items() if name != "tokens"}
        summary.update(
            grad_norm=float(grad_norm), zero_variance_groups=zero_variance / max(len({e.group for e in episodes}), 1)
        )
        summary["trained_tokens"] = float(total_tokens)
        return summary

    def _reference_logprobs(self, samples: list[Sample]) -> Any:
        live = self.policy.model
        self.policy.model = self.reference
        try:
            return self.policy.sequence_logprobs(samples)[0]
        finally:
            self.policy.model = live

    # ---- evaluation --------------------------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """Held-out success: test-split scenarios against each evaluation simulator."""
        results: dict[str, float] = {}
        successes = []
        for spec in self.config.eval_simulators:
            partner = make_simulator(spec, env=self.probe, side=self.partner_side)
            episodes = self.collect(
                step,
                groups=self.config.eval_tasks,
                group_size=self.config.eval_samples,
                split="test",
                partners=[partner],
                training=False,
            )
            results[f"heldout_success/{spec}"] = float(np.mean([e.success for e in episodes]))
            successes.extend(e.success for e in episodes)
        results["heldout_success"] = float(np.mean(successes)) if successes else float("nan")
        return results

    # ---- the loop ------------------------------------------------------------------------------------

    def run(self, *, resume: bool = False, progress: bool = True) -> list[dict[str, Any]]:
        if resume:
            self.resume()
        elif self.metrics_path.exists():
            self.metrics_path.unlink()
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
            if self.step % self.config.eval_every == 0 or self.step == self.config.steps:
                record.update(self.evaluate(self.step))
            log.write(record)
            if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                self.save()
            bar.update(1)
            bar.set_postfix(reward=f"{record['reward_mean']:.3f}", entropy=f"{record.get('entropy', float('nan')):.2f}")
        bar.close()
        log.close()
        history = read_metrics(self.metrics_path)
        plot_curves(history, self.output)
        return history

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        partners = [self.partners.pick(g) for g in range(self.config.groups_per_step)]
        episodes = self.collect(
            step,
            groups=self.config.groups_per_step,
            group_size=self.config.group_size,
            split="train",
            partners=partners,
            training=True,
        )
        rollout_time = time.perf_counter() - started
        record: dict[str, Any] = {"step": step + 1}
        rewards = np.array([e.reward for e in episodes])
        record.update(
            reward_mean=float(rewards.mean()),
            reward_std=float(rewards.std()),
            success=float(np.mean([e.success for e in episodes])),
            turns=float(np.mean([e.turns for e in episodes])),
            generated_tokens_per_s=sum(e.generated_tokens for e in episodes) / max(rollout_time, 1e-9),
        )
        record.update(self.update(episodes))
        record["step_time"] = time.perf_counter() - started
        return record

    # ---- checkpoints -----------------------------------------------------------------------------------

    def save(self) -> Path:
        """An atomic checkpoint of everything the next step depends on; keeps the last few."""
        import torch

        self.checkpoints.mkdir(exist_ok=True)
        final = self.checkpoints / f"step-{self.step:06d}"
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=self.checkpoints))
        self.policy.save(staging / "policy")
        torch.save(self.optimizer.state_dict(), staging / "optimizer.pt")
        torch.save(torch.get_rng_state(), staging / "torch_rng.pt")
        state = {
            "step": self.step,
            "baseline": [[list(k), v] for k, v in self.baseline.values.items()],
            "config": asdict(self.config),
        }
        (staging / "state.json").write_text(json.dumps(state))
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        _atomic_write(self.checkpoints / "latest", final.name)
        for old in sorted(p for p in self.checkpoints.glob("step-*") if p.is_dir())[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)
        return final

    def resume(self) -> bool:
        """Continues from the latest checkpoint, if there is one; metrics after it are dropped."""
        import torch

        pointer = self.checkpoints / "latest"
        if not pointer.exists():
            return False
        directory = self.checkpoints / pointer.read_text().strip()
        state = json.loads((directory / "state.json").read_text())
        self.policy.load_weights(directory / "policy")
        self.optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=True))
        torch.set_rng_state(torch.load(directory / "torch_rng.pt", weights_only=True))
        self.baseline.values = {tuple(k): v for k, v in state["baseline"]}
        self.step = int(state["step"])
        if self.metrics_path.exists():
            kept = [
                line for line in self.metrics_path.read_text().splitlines() if json.loads(line)["step"] <= self.step
            ]
            _atomic_write(self.metrics_path, "".join(line + "\n" for line in kept))
        return True


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
    right.plot(steps, [r.get("entropy", float("nan")) for r in history], color="tab:purple")
    right.set_xlabel("step")
    right.set_title("policy token entropy")
    figure.tight_layout()
    path = output / "curves.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return [path]
