"""The cache-vs-forward gap: log-probs of sampled tokens as the KV-cached generation loop reads
them off, against the training forward's over the whole sequence, for one model in float32 and in
bfloat16 (frozen weights and compute in `dtype`, as LoRA trains). The trainer's truncated
importance weight corrects exactly this gap (`baselines/training/loss.py`).

    python benchmarks/logprob_gap.py                       # SmolLM2-135M-Instruct
    python benchmarks/logprob_gap.py --policy tiny
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}
VIEWS = [
    [{"role": "user", "content": "Hello! Have you heard of Save the Children?"}],
    [{"role": "user", "content": "I would like to return the shoes I ordered last week."}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Tell me a story."}],
    [{"role": "user", "content": "What is the capital of France, and why?"}],
]


def gap(policy_spec: str, dtype: str, tokens: int, temperature: float, device: str = "cpu") -> dict[str, float]:
    """Mean and largest |log p_cache - log p_forward| over the generated tokens, and the share of
    tokens whose ratio lies outside the clip range [0.8, 1.28]."""
    import math

    import torch

    from baselines.training.policy import build_policy

    policy = build_policy(
        policy_spec,
        temperature=temperature,
        max_new_tokens=tokens,
        device=device,
        lora=LORA,
        seed=0,
        dtype=dtype,
    )
    traces, prompts = [], []
    for view in VIEWS:
        trace = policy.start_trace()
        prompts.append(trace.next_prompt(view, None))
        traces.append((trace, view))
    replies = policy.generate(prompts, list(range(len(prompts))))
    for (trace, view), reply in zip(traces, replies, strict=True):
        trace.record(reply.token_ids, reply.logprobs, len(view))
    samples = [s for trace, _ in traces for s in trace.samples()]
    with torch.no_grad():
        forward, mask, _ = policy.sequence_logprobs(samples)
    sampled = torch.tensor(
        [s.logprobs[1:] + [0.0] * (mask.shape[1] + 1 - len(s.logprobs)) for s in samples], device=forward.device
    )
    difference = (forward - sampled)[mask == 1]
    outside = (difference < math.log(0.8)) | (difference > math.log(1.28))
    return {
        "tokens": float(difference.numel()),
        "mean_abs": float(difference.abs().mean()),
        "max_abs": float(difference.abs().max()),
        "outside_clip": float(outside.float().mean()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="smollm2")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    print(f"{'dtype':<9} {'tokens':>6} {'mean |dlogp|':>13} {'max |dlogp|':>12} {'outside clip':>12}")
    for dtype in ("float32", "bfloat16"):
        row = gap(args.policy, dtype, args.tokens, args.temperature, args.device)
        print(
            f"{dtype:<9} {row['tokens']:6.0f} {row['mean_abs']:13.2e} {row['max_abs']:12.2e} "
            f"{row['outside_clip']:12.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
