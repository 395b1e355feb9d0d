"""verifiers evaluates a chat model as the agent of a SCOPE dialogue env, the user played by any
SCOPE simulator spec, the reward from the env (`baselines.integrations.verifiers_env`); with
`--seats user` the model plays the user against `--agent-policy`, scored by the env's user reward.

    python examples/verifiers_eval.py --env P4G --simulator scripted \\
        --base-url http://localhost:8000/v1 --model Qwen/Qwen3-4B-Instruct-2507 --episodes 8 --rollouts 4

The same run from verifiers' own command line (the plugin id is `scope-verifiers`):

    vf-eval scope-verifiers --env.taskset.env P4G --env.taskset.simulator scripted \\
        --env.taskset.episodes 8 -r 4 -m MODEL --client.base-url URL --no-push

Needs the `verifiers` extra, in a virtual environment of its own (verifiers pins `openai<3`):
`pip install -e ".[verifiers]"`. The model's API key, if it needs one, is read from the variable
`--api-key-var` names. Episodes and traces are written under `--output-dir`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import defaultdict

from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

PLUGIN = "scope-verifiers"


def eval_config(args: argparse.Namespace) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "env": {
                "seats": args.seats,
                "taskset": {
                    "id": PLUGIN,
                    "env": args.env,
                    "simulator": args.simulator,
                    "agent_policy": args.agent_policy,
                    "split": args.split,
                    "episodes": args.episodes,
                },
            },
            "model": args.model,
            "client": {"base_url": args.base_url, "api_key_var": args.api_key_var},
            "num_rollouts": args.rollouts,
            "max_concurrent": args.concurrency,
            "output_dir": args.output_dir,
            "push": False,
            "rich": None,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="P4G")
    parser.add_argument("--seats", choices=["agent", "user"], default="agent", help="the side the model plays")
    parser.add_argument("--simulator", default="scripted", help="a SCOPE simulator spec for the user side")
    parser.add_argument("--agent-policy", default="scripted", help="a SCOPE policy spec for the agent side")
    parser.add_argument("--split", default="test")
    parser.add_argument("--episodes", type=int, default=8, help="scenarios (tasks) of the split")
    parser.add_argument("--rollouts", type=int, default=1, help="episodes per scenario (a GRPO group)")
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. vLLM's /v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-var", default="OPENAI_API_KEY")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--output-dir", default="runs/verifiers-eval")
    args = parser.parse_args()
    start = time.perf_counter()
    episodes = asyncio.run(run_eval(eval_config(args)))
    seconds = time.perf_counter() - start
    rewards: dict[str, list[float]] = defaultdict(list)
    failed = 0
    for episode in episodes:
        if not episode.ok:
            failed += 1
            continue
        for trace in episode.traces:
            rewards[trace.task.data.name or "?"].append(trace.reward)
    every = [r for group in rewards.values() for r in group]
    for name, group in rewards.items():
        print(f"{name}: rewards {', '.join(f'{r:.3f}' for r in group)}")
    mean = statistics.fmean(every) if every else float("nan")
    print(f"{len(every)} episodes ({failed} failed), mean env reward {mean:.3f}, {seconds:.1f} s")


if __name__ == "__main__":
    main()
