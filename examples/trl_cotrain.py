"""Two TRL `GRPOTrainer`s co-train both seats of a SCOPE dialogue env: in each round the agent
trains against the user's latest checkpoint, then the user trains against the agent's, each the
other's opponent through a SCOPE spec (`hf:<checkpoint>`); the user is rewarded by the env's user
reward (adversarial 1 - r by default, cooperative r) or the curriculum reward
(`baselines.integrations.trl_env`).

    python examples/trl_cotrain.py --env P4G --model Qwen/Qwen3-0.6B --rounds 10 --steps 20
    python examples/trl_cotrain.py --env P4G --tiny --rounds 2 --steps 1   # offline, CPU, seconds a round

Needs the `trl` extra. `--tiny` co-trains two randomly initialised models built from a config.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer

from baselines.integrations.trl_env import environment_factory, reward_functions, task_dataset
from scope_envs.core.dialogue import AGENT, USER


def tiny_model(seed: int) -> tuple:
    from trl.chat_template_utils import qwen3_chat_template

    from sims.testing import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed)
    tokenizer.chat_template = qwen3_chat_template
    return model, tokenizer


def train_seat(
    args: argparse.Namespace, side: str, model: Any, tokenizer: Any, opponent: Path, round_index: int
) -> tuple[Any, Path]:
    """`args.steps` GRPO steps of one seat against the other seat's checkpoint `opponent`."""
    curriculum = side == USER and args.user_reward == "curriculum"
    env_kwargs = {} if side == AGENT or curriculum else {"user_reward": args.user_reward}
    rewards = reward_functions(*args.components, success=True, curriculum=curriculum)
    weights = [0.0] * len(rewards)
    weights[-1 if curriculum else 0] = 1.0  # the seat's reward counts; its components and success are logged
    config = GRPOConfig(
        output_dir=str(Path(args.output_dir) / f"{side}-{round_index}"),
        max_steps=args.steps,
        per_device_train_batch_size=args.generations,
        num_generations=args.generations,
        max_completion_length=args.max_completion_length,
        reward_weights=weights,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=round_index,
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = GRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
        train_dataset=task_dataset(args.env, args.steps * args.generations, side=side, **env_kwargs),
        environment_factory=environment_factory(args.env, f"hf:{opponent}", side=side, **env_kwargs),
        reward_funcs=rewards,
    )
    trainer.train()
    checkpoint = Path(args.output_dir) / f"{side}-{round_index}" / "checkpoint"
    trainer.save_model(str(checkpoint))
    tokenizer.save_pretrained(str(checkpoint))
    for entry in trainer.state.log_history:
        if "reward" in entry:
            parts = ", ".join(
                f"{k.split('/')[1]} {v:.3f}"
                for k, v in entry.items()
                if k.endswith("/mean") and k.startswith("rewards/")
            )
            calls = entry.get("tools/call_frequency", 0.0)
            print(f"round {round_index} {side} step {entry['step']}: {parts}, tool calls per rollout {calls:.2f}")
    return trainer.model, checkpoint.resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="P4G")
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B", help="both seats start from it")
    parser.add_argument("--tiny", action="store_true", help="two tiny random models built locally instead of --model")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps of each seat per round")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=512)
    parser.add_argument("--user-reward", default="adversarial", choices=["adversarial", "cooperative", "curriculum"])
    parser.add_argument("--components", nargs="*", default=[], help="reward components to log, e.g. donation")
    parser.add_argument("--output-dir", default="runs/trl-cotrain")
    args = parser.parse_args()
    seats = {}
    for index, side in enumerate((AGENT, USER)):
        model, tokenizer = tiny_model(index) if args.tiny else (None, None)
        if model is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model, tokenizer = (
                AutoModelForCausalLM.from_pretrained(args.model),
                AutoTokenizer.from_pretrained(args.model),
            )
        tokenizer.padding_side = "left"
        start = Path(args.output_dir) / f"{side}-start"
        model.save_pretrained(start)
        tokenizer.save_pretrained(start)
        seats[side] = [model, tokenizer, start.resolve()]
    for round_index in range(args.rounds):
        for side, other in ((AGENT, USER), (USER, AGENT)):
            model, tokenizer, _ = seats[side]
            seats[side][0], seats[side][2] = train_seat(args, side, model, tokenizer, seats[other][2], round_index)


if __name__ == "__main__":
    main()
