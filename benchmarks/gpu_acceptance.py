"""GPU acceptance: a few training steps of every method on P4G and tau2 retail, in bfloat16 with LoRA.

Nothing is downloaded: the policy is a randomly initialised Qwen3-architecture model with a
tokenizer built locally (saved to a temporary folder and trained through the `hf:PATH` spec), and
the user is each benchmark's scripted simulator (wrapped in Verbalized Sampling for `vs`; the
co-trained model itself for `cotrain` and `population`). For each run it reports how well the
log-probs the tokens were sampled with agree with the training forward's at the first update:
mean |log r| and the share of tokens whose r lies outside the clip range, both within the
dtype's tolerance (the mean of r proves nothing: over sampled tokens its expectation is 1
whatever the two distributions are), loss and reward per step, generated tokens/s, and, on a GPU, the peak
memory (`torch.cuda.max_memory_allocated`) next to `scope plan`'s estimate for the same run. Where
vLLM is installed, the same model then plays the P4G persuadee as `vllm-async:PATH` (continuous
batching) in an asynchronous rollout of 32 episodes: episodes/s, and every reply with its token
ids and log-probs. The exit status is non-zero when a check fails.

Usage:
    python benchmarks/gpu_acceptance.py                 # on the GPU (under 8 minutes on one H200)
    python benchmarks/gpu_acceptance.py --device cpu    # a smaller model; no memory comparison
    python benchmarks/gpu_acceptance.py --envs P4G --methods single population --steps 2
    python benchmarks/gpu_acceptance.py --device cpu --train-temperature 0.5   # must FAIL: T mismatch
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from baselines.apps.plan import GB, LINEAR_MODULES, plan
from baselines.training.config import TrainConfig, load_config
from baselines.training.trainer import Trainer

METHODS = ("single", "vs", "cotrain", "population")
ENVS = {
    "P4G": {"persona_source": "synthetic", "exchanges": 2},
    "Tau2Retail": {"max_turns": 6},
}
SHORT_ENVS = {"P4G": {"persona_source": "synthetic", "exchanges": 1}, "Tau2Retail": {"max_turns": 4}}  # on a CPU
# the model's shape per device: big enough on a GPU for its memory to be more than the allocator's noise
MODEL_SHAPES = {
    "cuda": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 64,
    },
    "cpu": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
    },
}
# at the first update, tokens sampled with the generation engine's log-probs and scored by the
# training forward: mean |log r| and the share of tokens outside the clip range, per dtype
LOG_RATIO_TOLERANCE = {"bfloat16": 0.02, "float32": 1e-4}
CLIP_SHARE_TOLERANCE = {"bfloat16": 0.01, "float32": 0.0}
SAMPLING_TEMPERATURE = 0.7
MEMORY_TOLERANCE = 0.25
H200_GB = 141


def build_model(directory: Path, device: str, seed: int = 0) -> Path:
    """A randomly initialised Qwen3 model and a local ChatML tokenizer, saved where `hf:PATH` loads them."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from sims.testing import tiny_chat_model

    _, tokenizer = tiny_chat_model(seed)  # the tokenizer the tests build offline
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=16384,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        **MODEL_SHAPES["cuda" if device.startswith("cuda") else "cpu"],
    )
    Qwen3ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def run_config(env: str, method: str, model: Path, output: Path, args: argparse.Namespace) -> TrainConfig:
    cuda = args.device.startswith("cuda")
    settings: dict[str, Any] = {
        "env": env,
        "env_kwargs": ENVS[env] if cuda else SHORT_ENVS[env],
        "policy": f"hf:{model}",
        "device": args.device,
        "method": method,
        "simulators": ["scripted"],
        "eval_simulators": ["scripted"],
        "eval_tasks": 1,
        "eval_every": args.steps,
        "checkpoint_every": args.steps,
        "steps": args.steps,
        "groups_per_step": 2,
        "group_size": 4 if cuda else 2,
        "max_new_tokens": 48 if cuda else 8,
        "temperature": SAMPLING_TEMPERATURE,
        "lr": 1e-4,
        "dtype": args.dtype,
        "lora": {"r": 8, "lora_alpha": 16, "target_modules": list(LINEAR_MODULES)},
        "gradient_checkpointing": True,
        "logprob_chunk": 256,
        "micro_batch": 4,
        "generation_batch": 8,
        "max_model_len": 16384,  # a tau2 agent prompt is ~5.5k tokens of this byte-level tokenizer
        "gpus": 1,
        "gpu_memory_gb": args.gpu_memory_gb,
        "pool_every": 1,
        "pool_size": 2,
        # the live simulator plays in every step, so its first update is checked too (the paper's draw,
        # one member per step and no floor, may give step 1 wholly to a snapshot)
        "live_min_share": 0.25,
        "tensorboard": False,
        "output_dir": str(output / f"{env}_{method}"),
        "seed": args.seed,
    }
    return load_config(None, [f"{key}={json.dumps(value)}" for key, value in settings.items()])  # JSON is YAML


class MeasuredTrainer(Trainer):
    """The trainer, noting the longest trained sequence and the largest batches it met, so that
    `scope plan` can be asked about the run as it really was."""

    longest = 0
    trained_rows = 0

    def update(self, learner: Any, episodes: list[Any], groups: list[int], *args: Any, **kwargs: Any) -> Any:
        samples = [s for e in episodes if e.group in groups for s in e.samples.get(learner.side, [])]
        self.longest = max([self.longest, *(len(s.ids) for s in samples)])
        self.trained_rows = max(self.trained_rows, len(samples))
        return super().update(learner, episodes, groups, *args, **kwargs)


@dataclasses.dataclass
class Outcome:
    env: str
    method: str
    records: list[dict[str, Any]]
    seconds: float
    peak_bytes: int | None
    planned_bytes: int | None
    failures: list[str]


def run_one(env: str, method: str, model: Path, output: Path, args: argparse.Namespace) -> Outcome:
    import torch

    config = run_config(env, method, model, output, args)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    trainer = MeasuredTrainer(config)
    if args.train_temperature is not None:  # a trainer that scores tokens at another temperature
        for learner in trainer.learners.values():
            learner.policy.temperature = args.train_temperature
    records = trainer.run(progress=False)
    seconds = time.perf_counter() - started
    failures = check_records(records, config)
    peak = planned = None
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        episodes = config.groups_per_step * config.group_size
        as_run = dataclasses.replace(
            config,
            max_model_len=max(trainer.longest, 1),
            micro_batch=min(config.micro_batch, max(trainer.trained_rows, 1)),
            generation_batch=min(config.generation_batch, episodes),
        )
        planned = plan(as_run).total
        if abs(peak / planned - 1) > MEMORY_TOLERANCE:
            failures.append(
                f"peak memory {peak / GB:.2f} GB is not within {MEMORY_TOLERANCE:.0%} "
                f"of the plan's {planned / GB:.2f} GB"
            )
    return Outcome(env, method, records, seconds, peak, planned, failures)


def check_records(records: list[dict[str, Any]], config: TrainConfig) -> list[str]:
    """The run trained every step with finite numbers, and its first update saw generation and
    training log-probs agree: mean |log r| and the share of tokens outside the clip range within
    the dtype's tolerance."""
    failures = []
    if len(records) != config.steps:
        failures.append(f"{len(records)} metrics records for {config.steps} steps")
    log_tolerance, clip_tolerance = LOG_RATIO_TOLERANCE[config.dtype], CLIP_SHARE_TOLERANCE[config.dtype]
    sides = [""] + (["simulator/"] if config.method in {"cotrain", "population"} else [])
    for record in records:
        for key in ("reward_mean", *(f"{side}loss" for side in sides)):
            if not math.isfinite(record.get(key, math.nan)):
                failures.append(f"step {record.get('step')}: {key} is {record.get(key)}")
    if records:
        for side in sides:
            gap = records[0].get(f"{side}behaviour_log_ratio_abs", math.nan)
            if not gap <= log_tolerance:
                failures.append(f"step 1 {side}behaviour_log_ratio_abs (mean |log r|) {gap:.4g} > {log_tolerance}")
            outside = records[0].get(f"{side}behaviour_clip_fraction", math.nan)
            if not outside <= clip_tolerance:
                failures.append(
                    f"step 1 {side}behaviour_clip_fraction (tokens with r outside the clip range) "
                    f"{outside:.4g} > {clip_tolerance}"
                )
    return failures


def format_table(outcomes: Sequence[Outcome]) -> str:
    lines = [
        f"{'env':<11} {'method':<11} {'|log r|@0':>9} {'clip@0':>7} {'tokens/s':>9} {'peak GB':>8} {'plan GB':>8} "
        f"{'seconds':>8}  loss per step / reward per step",
    ]
    for outcome in outcomes:
        first = outcome.records[0] if outcome.records else {}
        losses = " ".join(f"{r.get('loss', math.nan):+.3f}" for r in outcome.records)
        rewards = " ".join(f"{r.get('reward_mean', math.nan):.2f}" for r in outcome.records)
        tokens = sum(r.get("generated_tokens_per_s", 0.0) for r in outcome.records) / max(len(outcome.records), 1)
        peak = f"{outcome.peak_bytes / GB:8.2f}" if outcome.peak_bytes is not None else f"{'-':>8}"
        planned = f"{outcome.planned_bytes / GB:8.2f}" if outcome.planned_bytes is not None else f"{'-':>8}"
        lines.append(
            f"{outcome.env:<11} {outcome.method:<11} {first.get('behaviour_log_ratio_abs', math.nan):9.5f} "
            f"{first.get('behaviour_clip_fraction', math.nan):7.4f} {tokens:9.1f} "
            f"{peak} {planned} {outcome.seconds:8.1f}  {losses} / {rewards}"
        )
        lines += [f"    FAIL: {failure}" for failure in outcome.failures]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (the acceptance run) or cpu (the smaller check)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--gpu-memory-gb", type=float, default=H200_GB, help="the GPU's memory, for the plan")
    parser.add_argument("--output", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--train-temperature",
        type=float,
        default=None,
        help=f"score tokens at this temperature instead of the sampling one ({SAMPLING_TEMPERATURE}): "
        "an injected mismatch the checks must catch",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("gpu_acceptance: no CUDA device; --device cpu runs the smaller check", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="scope-acceptance-") as scratch:
        output = args.output or Path(scratch)
        model = build_model(Path(scratch) / "model", args.device, args.seed)
        outcomes = [run_one(env, method, model, output, args) for env in args.envs for method in args.methods]
        try:
            engine_failures = check_async_vllm(model) if args.device.startswith("cuda") else []
        except Exception as error:  # the training runs' table is printed all the same
            engine_failures = [f"{type(error).__name__}: {error}"]
    print(format_table(outcomes))
    failed = sum(bool(outcome.failures) for outcome in outcomes)
    print(f"{len(outcomes) - failed} of {len(outcomes)} runs passed")
    for failure in engine_failures:
        print(f"vllm-async: FAILED: {failure}")
    return 1 if failed or engine_failures else 0


def check_async_vllm(model: Path, episodes: int = 32) -> list[str]:
    """The model as the P4G persuadee behind vLLM's asynchronous engine, in an asynchronous
    rollout against the scripted persuader; what failed (nothing where vLLM is not installed)."""
    import asyncio

    from scope_envs.core.async_rollout import collect_async
    from scope_envs.core.chat import Message
    from scope_envs.core.registration import find_env
    from scope_envs.core.rollout import RolloutGroup
    from scope_envs.core.specs import make_policy
    from sims.vllm_backend import vllm_available

    usable, why = vllm_available()
    if not usable:
        print(f"vllm-async: skipped ({why})")
        return []
    user = make_policy(f"vllm-async:{model}", max_new_tokens=48, temperature=1.0)
    try:
        info = find_env("P4G")
        persuader = make_policy("scripted", env=info.make(**ENVS["P4G"]), side="agent")
        groups = [RolloutGroup(seed, {"agent": persuader, "user": user}) for seed in range(episodes)]
        started = time.perf_counter()
        played = collect_async(lambda: info.make(**ENVS["P4G"]), groups, group_size=1, split="train")
        elapsed = time.perf_counter() - started
        view = [Message(role="user", content="Hello! Have you heard of Save the Children?")]

        async def concurrent_replies() -> list[Any]:
            return await asyncio.gather(*(user.arespond(view, seed=seed) for seed in range(16)))

        replies = asyncio.run(concurrent_replies())
    finally:
        user.close()
    print(f"vllm-async: {len(played)} episodes in {elapsed:.1f} s ({len(played) / elapsed:.2f} episodes/s)")
    failures = []
    if len(played) != episodes:
        failures.append(f"{len(played)} of {episodes} episodes")
    if any(not r.token_ids or len(r.logprobs or []) != len(r.token_ids) for r in replies):
        failures.append("a reply without its token ids and log-probs")
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
