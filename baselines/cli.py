"""The `scope` command line: `scope envs`, `scope play` (later issues add `demo`, `train`, `eval`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scope", description="SCOPE: dialogue environments where the user simulator is an agent too."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("envs", help="list the registered environments, one line each")

    play = commands.add_parser("play", help="play episodes of an environment and print their transcripts")
    play.add_argument("env", help="an environment name (e.g. P4G) or Gymnasium id (scope/P4G-v0)")
    play.add_argument(
        "--agent", default="scripted", help="spec of the agent policy (default: the env's scripted agent)"
    )
    play.add_argument(
        "--simulator", default="scripted", help="spec of the user simulator (default: the env's scripted user)"
    )
    play.add_argument("--episodes", type=int, default=1)
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--task-id", default=None)
    play.add_argument("--split", default=None)
    play.add_argument("--json", action="store_true", help="print one JSON object per episode instead of transcripts")
    play.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a constructor argument of the env, e.g. termination=wait (JSON values are parsed); repeatable",
    )

    args = parser.parse_args(argv)
    if args.command == "envs":
        return _list_envs()
    return _play(args)


def _list_envs() -> int:
    import scope_envs  # noqa: F401  (registers the built-in environments)
    from scope_envs.core.registration import REGISTERED

    if not REGISTERED:
        print("no environments registered")
    width = max((len(info.agent_id) for info in REGISTERED.values()), default=0)
    for info in REGISTERED.values():
        print(f"{info.agent_id:<{width}}  {info.description}  (user side: {info.user_id})")
    return 0


def _play(args: argparse.Namespace) -> int:
    import scope_envs  # noqa: F401
    from scope_envs.core.batch import run_episodes
    from scope_envs.core.policy import import_object
    from scope_envs.core.registration import REGISTERED

    name = args.env.removeprefix("scope/").removesuffix("-User-v0").removesuffix("-v0")
    if name not in REGISTERED:
        print(f"unknown environment {args.env!r}; `scope envs` lists them", file=sys.stderr)
        return 2
    env_cls = import_object(REGISTERED[name].entry_point)
    env_kwargs = dict(_key_value(item) for item in args.env_arg)
    envs = [env_cls(**env_kwargs) for _ in range(args.episodes)]
    options = {key: value for key, value in (("task_id", args.task_id), ("split", args.split)) if value is not None}
    results = run_episodes(envs, {"agent": args.agent, "user": args.simulator}, seeds=args.seed, options=options)
    for result in results:
        if args.json:
            print(
                json.dumps(
                    {
                        "scenario_id": result.scenario_id,
                        "rewards": result.rewards,
                        "end_reason": result.end_reason,
                        "turns": result.turns,
                        "reward_info": result.reward_info,
                    },
                    default=str,
                )
            )
            continue
        print(f"=== episode {result.index}  scenario {result.scenario_id} ===")
        print(result.transcript)
        ended = "terminated" if result.terminated else "truncated"
        print(f"--- {ended}: {result.end_reason} after {result.turns} turns; rewards {result.rewards}")
        print(f"    agent reward breakdown: {result.reward_info['agent']['components']}\n")
    return 0


def _key_value(item: str) -> tuple[str, object]:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise SystemExit(f"--env-arg expects KEY=VALUE, got {item!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


if __name__ == "__main__":
    raise SystemExit(main())
