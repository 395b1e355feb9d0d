"""The same GRPO update through this trainer and through TRL's `GRPOTrainer` loss, in one process.

Same tiny model, same batch of sequences (prompt + completion token ids), same settings (token-level
"dapo" aggregation, clip 0.2/0.28, no KL): each side computes per-token log-probs, the clipped
loss and its gradient. Prints the median time of each and the ratio TRL / ours (> 1: ours is
faster). Needs `pip install trl`. Usage: python benchmarks/grpo_loss_vs_trl.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch


def build_updates(batch: int, prompt: int, completion: int, output_dir: str) -> tuple[Callable, Callable]:
    """The same GRPO update as two callables, ours and TRL's (each computes the loss and its gradient)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from baselines.training.loss import LossConfig, policy_loss
    from baselines.training.policy import LMPolicy
    from scope_envs.core.rollout import Sample
    from sims.hf_backend import HFSimulator
    from sims.testing import tiny_chat_model

    model, tokenizer = tiny_chat_model(0)
    policy = LMPolicy(HFSimulator(model, tokenizer=tokenizer, temperature=1.0))
    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    prompt_ids = torch.randint(3, vocab, (batch, prompt), generator=generator)
    completion_ids = torch.randint(3, vocab, (batch, completion), generator=generator)
    advantages = torch.randn(batch, generator=generator)
    config = GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=batch,
        num_generations=batch,
        max_completion_length=completion,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        report_to=[],
        use_cpu=True,
        logging_steps=1000,
    )
    dataset = Dataset.from_list([{"prompt": "hello"}] * batch)
    trl = GRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trl.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which this bypasses
    trl_inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": torch.ones_like(completion_ids),
        "advantages": advantages,
        "num_items_in_batch": torch.tensor(float(batch * completion)),
    }
    samples = [
        Sample(p + c, [0] * len(p) + [1] * len(c), [0.0] * (len(p) + len(c)), len(p))
        for p, c in zip(prompt_ids.tolist(), completion_ids.tolist())
    ]
    loss_config = LossConfig(clip_low=0.2, clip_high=0.28, aggregation="token_mean")

    def ours() -> float:
        model.zero_grad()
        logprobs, mask, _ = policy.sequence_logprobs(samples)
        adv = advantages[:, None].expand_as(logprobs)
        loss, _ = policy_loss(logprobs, logprobs.detach(), adv, mask, loss_config)
        loss.backward()
        return float(loss)

    def theirs() -> float:
        model.zero_grad()
        loss = trl._compute_loss(model, trl_inputs)
        loss.backward()
        return float(loss)

    model.train()
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=96)
    parser.add_argument("--completion", type=int, default=64)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as output:
        ours, theirs = build_updates(args.batch, args.prompt, args.completion, output)
        ours_loss, trl_loss = ours(), theirs()  # warm-up, and the two losses agree
        times: dict[str, list[float]] = {"ours": [], "trl": []}
        for _ in range(args.repeats):
            for name, step in (("ours", ours), ("trl", theirs)):
                started = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - started)
    ours_time, trl_time = statistics.median(times["ours"]), statistics.median(times["trl"])
    print(f"loss: ours {ours_loss:.6f}, TRL {trl_loss:.6f}")
    print(f"median update time: ours {ours_time * 1e3:.1f} ms, TRL {trl_time * 1e3:.1f} ms")
    print(f"ratio TRL / ours: {trl_time / ours_time:.2f} (above 1: ours is faster)")


if __name__ == "__main__":
    main()
