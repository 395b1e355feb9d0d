"""Where a text training step's time and memory go, beside plain transformers doing the same work.

Ours: one step of a run config (default `p4g_smollm2_exploit`, the text exploitation pilot), its
phases timed as the trainer runs them: prefill (reading prompts), decode (sampling replies), the
training forward (which also gives the "old" log-probs: there is no separate scoring pass), the
backward and the optimizer. The anchor: the same turns' prompts through transformers' own batched
`generate` (a KV cache within a turn, the conversation read whole at every turn), then one forward
and backward over the same training sequences with full logits, and AdamW. Each side runs in a
fresh process of its own on one thread, so that each reports its own peak resident memory.

    python benchmarks/text_step.py [--config p4g_smollm2_exploit] [override ...]

Prints seconds per phase, tokens/s and peak RSS for both, and their ratios (anchor / ours).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
from collections.abc import Callable
from typing import Any

CONFIG = "p4g_smollm2_exploit"
STEP_OVERRIDES = ["steps=1", "eval_every=0", "save_episodes=0", "cpu_threads=1", "tensorboard=false"]
PHASES = ("prefill", "decode", "training forward", "backward", "optimizer")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class PhaseClock:
    """Seconds spent in each phase, added up by wrapping the callables that run them."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def wrap(self, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - started

        return timed


def make_trainer(config: str, overrides: list[str], output_dir: str) -> Any:
    from baselines.training.config import load_config
    from baselines.training.trainer import Trainer

    return Trainer(load_config(config, [*STEP_OVERRIDES, f"output_dir={output_dir}", *overrides]))


def our_step(config: str, overrides: list[str], output_dir: str) -> dict[str, Any]:
    """One training step as the trainer takes it, its phases timed; the episodes' samples for the anchor."""
    import torch

    trainer = make_trainer(config, overrides, output_dir)
    side = trainer.side
    learner = trainer.learners[side]
    policy = learner.policy
    clock = PhaseClock()
    simulator = policy.simulator
    prefill = clock.wrap("prefill", simulator._prefill)
    simulator._prefill = prefill
    generate = simulator.generate

    def decode(*args: Any, **kwargs: Any) -> Any:
        before = clock.seconds["prefill"]
        started = time.perf_counter()
        replies = generate(*args, **kwargs)
        clock.seconds["decode"] += time.perf_counter() - started - (clock.seconds["prefill"] - before)
        return replies

    simulator.generate = decode
    policy.sequence_logprobs = clock.wrap("training forward", policy.sequence_logprobs)
    learner.optimizer.step = clock.wrap("optimizer", learner.optimizer.step)
    started = time.perf_counter()
    players, labels = trainer.players(0, trainer.config.groups_per_step)
    episodes = trainer.collect(0, group_size=trainer.config.group_size, split="train", players=players)
    rollout = time.perf_counter() - started
    updating = time.perf_counter()
    stats = trainer.update(learner, episodes, list(range(trainer.config.groups_per_step)), labels)
    update = time.perf_counter() - updating
    seconds = clock.seconds
    seconds["backward"] = update - seconds["training forward"] - seconds["optimizer"]
    samples = [s for e in episodes for s in e.samples.get(side, [])]
    return {
        "seconds": seconds,
        "step": rollout + update,
        "generated_tokens": sum(e.generated_tokens for e in episodes),
        "rollout": rollout,
        "trained_tokens": stats.get("trained_tokens", 0),
        "sequence_tokens": sum(len(s.ids) for s in samples),
        "peak_rss_mb": peak_rss_mb(),
        "samples": [(s.ids, s.mask) for s in samples],
        "torch_threads": torch.get_num_threads(),
    }


def turns_of(ids: list[int], mask: list[int]) -> list[tuple[list[int], int]]:
    """Each generated turn of a training sequence: (its prompt, its number of generated tokens)."""
    turns, start = [], None
    for position, trained in enumerate([*mask, 0]):
        if trained and start is None:
            start = position
        elif not trained and start is not None:
            turns.append((ids[:start], position - start))
            start = None
    return turns


def anchor_step(
    config: str, overrides: list[str], output_dir: str, samples: list[tuple[list[int], list[int]]]
) -> dict[str, Any]:
    """The same work with plain transformers: each turn's prompts through `generate`, then a
    forward and backward over the same sequences (full logits) and an AdamW step."""
    import torch

    trainer = make_trainer(config, overrides, output_dir)  # the same model, settings and thread count
    cfg = trainer.config
    policy = trainer.learners[trainer.side].policy
    model, tokenizer = policy.model, policy.tokenizer
    pad = tokenizer.pad_token_id
    clock = PhaseClock()
    per_turn = [turns_of(ids, mask) for ids, mask in samples]
    generated = 0
    model.eval()
    for turn in range(max(len(t) for t in per_turn)):
        prompts = [t[turn][0] for t in per_turn if len(t) > turn]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=attention,
                do_sample=True,
                temperature=cfg.temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=cfg.max_new_tokens,
                pad_token_id=pad,
            )
        clock.seconds["decode"] += time.perf_counter() - started
        generated += int((out[:, width:] != pad).sum())
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    started = time.perf_counter()
    for start in range(0, len(samples), cfg.micro_batch):
        chunk = samples[start : start + cfg.micro_batch]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in chunk])
        attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in chunk])
        mask = torch.tensor([m + [0] * (width - len(m)) for _, m in chunk])[:, 1:].float()
        forward = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[:, :-1]
        logp = torch.log_softmax(logits.float() / cfg.temperature, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        loss = -(logp * mask).sum() / mask.sum()
        clock.seconds["training forward"] += time.perf_counter() - forward
        loss.backward()
    stepping = time.perf_counter()
    optimizer.step()
    clock.seconds["optimizer"] = time.perf_counter() - stepping
    clock.seconds["backward"] = stepping - started - clock.seconds["training forward"]
    return {
        "seconds": clock.seconds,
        "step": sum(clock.seconds.values()),
        "generated_tokens": generated,
        "rollout": clock.seconds["decode"],
        "peak_rss_mb": peak_rss_mb(),
        "torch_threads": torch.get_num_threads(),
    }


def in_fresh_process(function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """`function(*args)` in a spawned process (its own peak memory), its result sent back."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(function, args)


def measure(
    config: str = CONFIG, overrides: list[str] | None = None, output_dir: str = "runs/benchmark_text_step"
) -> dict[str, Any]:
    overrides = list(overrides or [])
    ours = in_fresh_process(our_step, config, overrides, output_dir)
    anchor = in_fresh_process(anchor_step, config, overrides, output_dir + "-anchor", ours.pop("samples"))
    return {"ours": ours, "anchor": anchor}


def report(results: dict[str, Any]) -> str:
    ours, anchor = results["ours"], results["anchor"]
    lines = [f"{'':24}{'ours':>10}{'anchor':>10}{'anchor/ours':>13}"]
    for phase in ("prefill", "decode"):  # transformers' generate does both in one call
        lines.append(f"{phase + ' (s)':24}{ours['seconds'][phase]:10.1f}{'-':>10}{'-':>13}")
    rows = [
        ("rollout (s)", ours["rollout"], anchor["rollout"]),
        *((f"{phase} (s)", ours["seconds"][phase], anchor["seconds"][phase]) for phase in PHASES[2:]),
        ("step (s)", ours["step"], anchor["step"]),
        (
            "generated tokens/s",
            ours["generated_tokens"] / ours["rollout"],
            anchor["generated_tokens"] / anchor["rollout"],
        ),
        ("peak RSS (MB)", ours["peak_rss_mb"], anchor["peak_rss_mb"]),
    ]
    for name, o, a in rows:
        lines.append(f"{name:24}{o:10.1f}{a:10.1f}{a / o:12.2f}x")
    lines.append(
        f"generated {ours['generated_tokens']} tokens (anchor {anchor['generated_tokens']}); trained "
        f"{ours['trained_tokens']:.0f} of {ours['sequence_tokens']} sequence tokens; "
        f"{ours['generated_tokens'] / ours['step']:.1f} generated tokens per step-second; "
        f"torch threads {ours['torch_threads']}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()
    results = measure(args.config, args.overrides)
    print(report(results))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
