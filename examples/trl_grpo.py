"""TRL's `GRPOTrainer` trains a chat model in one seat of a SCOPE dialogue env: the agent, the user
played by any SCOPE simulator spec, or (`--side user`) the user, the agent played by any SCOPE
agent spec; the reward is the env's for that seat (`baselines.integrations.trl_env`).

    python examples/trl_grpo.py --env Tau2Retail --simulator openai:gpt-5-mini --model Qwen/Qwen3-0.6B
    python examples/trl_grpo.py --env P4G --simulator scripted --tiny --steps 2   # offline, CPU, seconds a step
    python examples/trl_grpo.py --env P4G --side user --partner scripted --tiny --steps 2

Needs the `trl` extra (`pip install -e ".[trl]"`). `--tiny` trains a randomly initialised model
built from a config (no download), for trying the wiring; a real run names a Hugging Face model
whose chat template TRL can parse tool calls of (Qwen3, Llama 3.1/3.2, ...).
"""

from __future__ import annotations

import argparse

import torch
from trl import GRPOConfig, GRPOTrainer

from baselines.integrations.trl_env import environment_factory, reward_functions, task_dataset


def tiny_model() -> tuple:
    from trl.chat_template_utils import qwen3_chat_template

    from sims.testing import tiny_chat_model

    model, tokenizer = tiny_chat_model()
    tokenizer.chat_template = qwen3_chat_template
    return model, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="P4G")
    parser.add_argument("--side", default="agent", choices=["agent", "user"], help="the seat the model plays")
    parser.add_argument(
        "--partner", "--simulator", default="scripted", help="a SCOPE spec for the other seat (the user's simulator)"
    )
    parser.add_argument("--components", nargs="*", default=[], help="reward components to log, e.g. donation")
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model built locally instead of --model")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=512)
    parser.add_argument("--output-dir", default="runs/trl-grpo")
    args = parser.parse_args()
    model, tokenizer = tiny_model() if args.tiny else (args.model, None)
    if tokenizer is not None:
        tokenizer.padding_side = "left"
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=args.generations,
        num_generations=args.generations,
        max_completion_length=args.max_completion_length,
        reward_weights=[1.0] + [0.0] * (len(args.components) + 1),  # the seat's reward; the rest logged
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = GRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
        train_dataset=task_dataset(args.env, args.steps * args.generations, side=args.side),
        environment_factory=environment_factory(args.env, args.partner, side=args.side),
        reward_funcs=reward_functions(*args.components, success=True),
    )
    trainer.train()
    for entry in trainer.state.log_history:
        if "reward" in entry:
            calls = entry.get("tools/call_frequency", 0.0)
            success = entry["rewards/scope_success/mean"]
            print(
                f"step {entry['step']}: {args.side} reward {entry['reward']:.3f}, {args.side} success {success:.3f}, "
                f"tool calls per rollout {calls:.2f}, step time {entry.get('step_time', float('nan')):.1f} s"
            )


if __name__ == "__main__":
    main()
