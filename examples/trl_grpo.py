"""TRL's `GRPOTrainer` trains a chat model as the agent of a SCOPE dialogue env, the user played by
any SCOPE simulator spec, the reward from the env (`baselines.integrations.trl_env`).

    python examples/trl_grpo.py --env Tau2Retail --simulator openai:gpt-5-mini --model Qwen/Qwen3-0.6B
    python examples/trl_grpo.py --env P4G --simulator scripted --tiny --steps 2   # offline, CPU, seconds a step

Needs the `trl` extra (`pip install -e ".[trl]"`). `--tiny` trains a randomly initialised model
built from a config (no download), for trying the wiring; a real run names a Hugging Face model
whose chat template TRL can parse tool calls of (Qwen3, Llama 3.1/3.2, ...).
"""

from __future__ import annotations

import argparse

import torch
from trl import GRPOConfig, GRPOTrainer

from baselines.integrations.trl_env import environment_factory, task_dataset


def tiny_model() -> tuple:
    from trl.chat_template_utils import qwen3_chat_template

    from sims.testing import tiny_chat_model

    model, tokenizer = tiny_chat_model()
    tokenizer.chat_template = qwen3_chat_template
    return model, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="P4G")
    parser.add_argument("--simulator", default="scripted", help="a SCOPE simulator spec for the user side")
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
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = GRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
        train_dataset=task_dataset(args.env, args.steps * args.generations),
        environment_factory=environment_factory(args.env, args.simulator),
    )
    trainer.train()
    for entry in trainer.state.log_history:
        if "reward" in entry:
            calls = entry.get("tools/call_frequency", 0.0)
            print(f"step {entry['step']}: env reward {entry['reward']:.3f}, tool calls per rollout {calls:.2f}")


if __name__ == "__main__":
    main()
