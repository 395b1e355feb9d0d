"""The `scope` command line: `scope demo`, `scope envs`, `scope play`, `scope diagnose`, `scope train`, `scope eval`."""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from baselines.arguments import DEBUG_VARIABLE, add_env_arg, add_key_values, debugging, env_kwargs_of, failed
from scope_envs.core.data import MissingDataError
from scope_envs.core.errors import UsageError
from scope_envs.core.extras import MissingExtraError, missing_module_hint, needs_extra

if TYPE_CHECKING:
    from baselines.training.config import TrainConfig

# `scope diagnose`'s (states, replies per state, tokens per reply): on a CPU a few short replies
# per state, so that the README's command ends in about two minutes on two cores; on a GPU more.
DIAGNOSE_SIZES = {"cpu": (4, 4, 32), "gpu": (8, 8, 256)}
# One retry of a Verbalized Sampling list (a small model's broken lists are otherwise asked for three times).
DIAGNOSE_VS_RETRIES = 1
# States whose replies a local model decodes together: a decoding step over 16 rows costs about
# twice one over 4 on a CPU, and the bar still moves twice per simulator at the CPU's 4 states.
DIAGNOSE_STATES_PER_CALL = 2
LOCAL_MODEL_BACKENDS = ("hf", "smollm2", "vllm", "vllm-async")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scope", description="SCOPE: dialogue environments where the user simulator is an agent too."
    )
    parser.add_argument(
        "--debug", action="store_true", help=f"on an error, show its traceback, not one line (or ${DEBUG_VARIABLE}=1)"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo",
        help="simulator collapse and its remedies on a fast act-level benchmark (CPU, minutes)",
        description="Trains an agent with single-simulator RL, Verbalized Sampling, Co-Training, Population "
        "Co-Training and, as a reference, on the held-out panel itself, several seeds each; writes a report "
        "(held-out success, training reward, policy entropy; mean and 95% interval over seeds) and plots.",
    )
    from baselines.apps.demo import add_arguments

    add_arguments(demo)

    commands.add_parser("envs", help="list the registered environments, one line each")

    play = commands.add_parser("play", help="play episodes of an environment and print their transcripts")
    play.add_argument("env", help="an environment name or Gymnasium id (`scope envs` lists them)")
    play.add_argument(
        "--agent", default="scripted", help="spec of the agent policy (default: the env's scripted agent)"
    )
    play.add_argument(
        "--simulator", default="scripted", help="spec of the user simulator (default: the env's scripted user)"
    )
    play.add_argument("--episodes", type=int, default=1, help="how many episodes to play, each its own env (1)")
    play.add_argument(
        "--seed", type=int, default=0, help="the first episode's seed; episode i plays seed + i (default 0)"
    )
    play.add_argument(
        "--task-id", default=None, help="play this task (scenario) of the env; by default one is drawn per episode"
    )
    play.add_argument(
        "--split", default=None, help="draw tasks from this split (e.g. train, test); by default the env's own choice"
    )
    play.add_argument("--json", action="store_true", help="print one JSON object per episode instead of transcripts")
    play.add_argument(
        "--rollout",
        choices=("auto", "async", "lockstep"),
        default="auto",
        help="async: each episode takes its turn as soon as its own reply arrives; auto (default): async when a "
        "player answers asynchronously (API backends)",
    )
    add_env_arg(play)
    from baselines.apps.people import commands as people  # play --human, serve, view, study export, export

    people.add_play_arguments(play)
    people.add_commands(commands)

    diagnose = commands.add_parser(
        "diagnose",
        help="measure how mode-collapsed simulators are on states of an environment's conversations",
        description="Each simulator answers --samples times on each of --states conversation states; the table "
        "and the plot say how alike its replies are. The defaults depend on the machine: local models without "
        f"a GPU get {_sizes('cpu')} (about two minutes on two CPU cores for the README's command), with one "
        f"{_sizes('gpu')}; the command says which it used.",
    )
    diagnose.add_argument("--env", required=True, help="the environment whose conversations give the states")
    diagnose.add_argument("--side", default="user", choices=["agent", "user"], help="the side simulated (user)")
    add_env_arg(diagnose)
    diagnose.add_argument("--simulator", action="append", required=True, help="a simulator spec; repeatable")
    diagnose.add_argument(
        "--vs",
        action="store_true",
        help="also measure each model simulator wrapped in Verbalized Sampling (--k candidates per reply)",
    )
    diagnose.add_argument("--k", type=int, default=3, help="candidates per reply with --vs (default 3)")
    diagnose.add_argument(
        "--reference", default=None, help="a simulator spec whose replies are the reference (gamma, coverage)"
    )
    cpu, gpu = DIAGNOSE_SIZES["cpu"], DIAGNOSE_SIZES["gpu"]
    diagnose.add_argument(
        "--states", type=int, default=None, help=f"conversation states (default {cpu[0]}; {gpu[0]} with a GPU)"
    )
    diagnose.add_argument(
        "--samples", type=int, default=None, help=f"replies per state (default {cpu[1]}; {gpu[1]} with a GPU)"
    )
    diagnose.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"longest reply of a local model (hf:, smollm2, vllm:), in tokens (default {cpu[2]}; {gpu[2]} with "
        "a GPU; a Verbalized Sampling list gets --k times as many)",
    )
    diagnose.add_argument("--seed", type=int, default=0)
    diagnose.add_argument("--embedding", choices=["auto", "minilm", "tfidf"], default="auto")
    diagnose.add_argument("--plot", default="collapse.png", help="where to write the plot (PNG)")
    diagnose.add_argument("--json", action="store_true", help="print the reports as JSON lines")
    add_key_values(
        diagnose,
        "--sim-arg",
        help="a keyword for every simulator built from a backend (not `scripted`, whose rules take none), "
        "e.g. temperature=0.7",
    )

    train = commands.add_parser("train", help="train a policy (YAML config plus key=value overrides)")
    train.add_argument(
        "config",
        nargs="?",
        default=None,
        help="a YAML config file, or the name of one a benchmark ships",
    )
    train.add_argument("overrides", nargs="*", help="key=value settings that override the config")
    train.add_argument("--resume", action="store_true", help="continue from the newest intact checkpoint in output_dir")
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an output_dir that holds another run, deleting its checkpoints, metrics and pool",
    )
    train.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run on Ray: a cluster's address, or nothing to start a local cluster (config key ray_address)",
    )

    evaluate = commands.add_parser("eval", help="held-out success of the latest checkpoint of a run")
    evaluate.add_argument("config", help="the run's YAML config")
    evaluate.add_argument("overrides", nargs="*", help="key=value settings that override the config")

    from baselines.apps import plan

    plan.add_arguments(commands.add_parser("plan", help="the GPU memory a training config needs, before it runs"))

    from baselines.apps import evaluate as cross_play
    from baselines.apps import fidelity

    cross_play.add_arguments(commands.add_parser("evaluate", help="agents x simulators: success, pass^k, intervals"))
    fidelity.add_arguments(commands.add_parser("fidelity", help="a simulator's conversations against people's"))

    for command in commands.choices.values():  # `scope play ... --debug` as well as `scope --debug play ...`
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ModuleNotFoundError as error:
        hint = missing_module_hint(f"scope {args.command}", error)
        if hint is None or debugging(args):
            raise
        print(hint, file=sys.stderr)
        return 2
    except Exception as error:
        status = _ordinary(error)
        if status is None:
            raise  # a bug: its traceback
        return failed(args, error, status)


def _ordinary(error: Exception) -> int | None:
    """The exit status of an error that ends a command with one line (secrets never reach it: the
    API backends redact their errors): a mistake in what was asked (2); a missing package, data
    set, file or API key, a refusal of the trainer, a fatal simulator error (1). None for anything
    else, a bug, which keeps its traceback."""
    import yaml

    from baselines.training.run import RunError
    from scope_envs.core.policy import FatalPolicyError, PolicyError
    from sims.pool import DamagedSnapshot

    if isinstance(error, (UsageError, yaml.YAMLError)):
        return 2
    # a PolicyError this far up was raised outside any episode: a simulator that cannot even be built
    stops = (MissingExtraError, MissingDataError, FileNotFoundError, RunError, PolicyError, FatalPolicyError)
    stops += (DamagedSnapshot,)  # a pool member that fails its checksums: named, never loaded
    return 1 if isinstance(error, stops) else None


def _run(args: argparse.Namespace) -> int:
    from baselines.apps import evaluate as cross_play
    from baselines.apps import fidelity, plan
    from baselines.apps.people import commands as people

    if people.wants(args):
        return people.run(args)
    if args.command == "demo":
        return _demo(args)
    if args.command == "train":
        return _train(args)
    if args.command == "eval":
        return _eval(args)
    if args.command == "plan":
        return plan.run(args)
    if args.command in ("evaluate", "fidelity"):
        return (cross_play if args.command == "evaluate" else fidelity).run(args)
    if args.command == "envs":
        return _list_envs()
    if args.command == "diagnose":
        return _diagnose(args)
    return _play(args)


def _diagnose(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from scope_envs.core.specs import SCRIPTED, check_spec, split_spec, wrapped
    from scope_envs.core.views import build_env
    from sims.diagnostics import diagnose, dialogue_states, format_table, plot, sample_replies
    from sims.verbalized import VerbalizedSampling

    env = build_env(args.env, **env_kwargs_of(args))
    for spec in [*args.simulator, *([args.reference] if args.reference else [])]:
        check_spec(spec, env=env)  # a typo said before anything runs
    _size_for_the_machine(args)
    states = dialogue_states(env, args.side, args.states, seed=args.seed)
    simulators = []
    for spec in args.simulator:
        backend = split_spec(spec)[0]
        simulator = _diagnosed_simulator(spec, env, args, args.max_new_tokens)
        if simulator is None:
            return 2
        simulators.append((spec, simulator))
        if not args.vs:
            continue
        if backend == SCRIPTED:
            print(f"--vs: not for {spec}: a rule-based simulator cannot write a list of candidate replies")
            continue
        simulators.append(
            (
                wrapped("vs", spec, args.k),
                VerbalizedSampling(_with_room_for(simulator, args.k), k=args.k, retries=DIAGNOSE_VS_RETRIES),
            )
        )
    reference = None
    if args.reference:
        built = _diagnosed_simulator(args.reference, env, args, args.max_new_tokens)
        if built is None:
            return 2
        reference = sample_replies(built, states, args.samples, seed=args.seed + 1)
    reports = []
    with tqdm(total=len(simulators) * len(states), unit="state", desc="replies") as bar:
        for name, simulator in simulators:
            bar.set_description(f"{name}: {args.samples} replies per state")
            replies = []
            for first in range(0, len(states), DIAGNOSE_STATES_PER_CALL):
                chunk = states[first : first + DIAGNOSE_STATES_PER_CALL]
                replies += sample_replies(simulator, chunk, args.samples, seed=args.seed, first_index=first)
                bar.update(len(chunk))
            reports.append(diagnose(name, replies, reference, method=args.embedding))
    for name, simulator in simulators:
        if isinstance(simulator, VerbalizedSampling):
            stats = simulator.stats
            print(
                f"{name}: {stats['verbalized']} replies drawn from a list of {args.k} candidates the model wrote "
                f"({stats['retried']} of them after a retry); {stats['fallback']} plain replies where it wrote "
                "no usable list"
            )
    if args.json:
        for report in reports:
            print(json.dumps(report.as_dict()))
    else:
        print(format_table(reports))
    print(f"plot: {plot(reports, args.plot)}")
    return 0


def _sizes(machine: str) -> str:
    return _sizes_of(DIAGNOSE_SIZES[machine])


def _sizes_of(sizes: Sequence[int]) -> str:
    states, samples, tokens = sizes
    return f"{states} states x {samples} replies of at most {tokens} tokens"


def _size_for_the_machine(args: argparse.Namespace) -> None:
    """Fills in the --states, --samples and --max-new-tokens left unset, with a GPU's sizes when a
    local model runs on one and a CPU's otherwise, and says which in one line (on stderr, so that
    --json stays JSON). On a CPU, local models run on one thread unless OMP_NUM_THREADS says
    otherwise: decoding a few replies at a time is bound by memory, and on a busy two-core machine
    a second thread mostly waits for the first (one decoding step of smollm2 took ten times the
    CPU time on two threads)."""
    import os

    from scope_envs.core.specs import split_spec

    specs = [*args.simulator, *([args.reference] if args.reference else [])]
    local = any(_local(split_spec(spec)[0]) for spec in specs)
    torch = _torch_if_installed() if local else None
    machine = "gpu" if torch is not None and torch.cuda.is_available() else "cpu"
    given = (args.states, args.samples, args.max_new_tokens)
    sizes = [value if value is not None else default for value, default in zip(given, DIAGNOSE_SIZES[machine])]
    args.states, args.samples, args.max_new_tokens = sizes
    note = f"defaults sized for a {machine.upper()}"
    if not local:
        note = "no local model: a CPU's defaults"
    elif machine == "cpu":
        note += f", no GPU found; a GPU's: {_sizes('gpu')}"
        if torch is not None and "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(1)
            note += "; local models on one thread, OMP_NUM_THREADS to change"
    print(
        f"scope diagnose: {_sizes_of(sizes)} per simulator ({note}; --states, --samples, --max-new-tokens to change)",
        file=sys.stderr,
    )


def _torch_if_installed() -> object | None:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _local(backend: str) -> bool:
    return backend in LOCAL_MODEL_BACKENDS


def _with_room_for(simulator: object, k: int) -> object:
    """The same model (shared, not loaded again) with k times the reply budget, for a list of k
    candidates; a simulator without a token budget as it is."""
    if not hasattr(simulator, "max_new_tokens"):
        return simulator
    wide = copy.copy(simulator)
    wide.max_new_tokens = simulator.max_new_tokens * k
    return wide


def _diagnosed_simulator(spec: str, env: object, args: argparse.Namespace, max_new_tokens: int) -> object | None:
    """The simulator of `spec` with the --sim-arg keywords (backends only: `scripted` takes none)
    and, for a local model, --max-new-tokens; None after saying in one line why it cannot be built."""
    from scope_envs.core.specs import SCRIPTED, split_spec
    from sims import make_simulator

    backend = split_spec(spec)[0]
    keywords = {} if backend == SCRIPTED else dict(args.sim_arg)
    if _local(backend):
        keywords.setdefault("max_new_tokens", max_new_tokens)
    try:
        return make_simulator(spec, env=env, side=args.side, **keywords)
    except TypeError as error:
        print(f"scope diagnose: {spec} does not take {sorted(keywords)}: {error}", file=sys.stderr)
        return None


def _split_overrides(config: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        return None, [config, *overrides]  # `scope train key=value ...` with no file
    return config, overrides


def _config(args: argparse.Namespace, *more: str) -> TrainConfig:
    """The config `scope train` or `scope eval` names, with its overrides and `more`; one that
    cannot be read (no such file, an unknown key, a bad value) is the user's mistake."""
    from baselines.training.config import load_config

    path, overrides = _split_overrides(args.config, args.overrides)
    try:
        return load_config(path, [*overrides, *more])
    except ValueError as error:
        raise UsageError(str(error)) from error


def _train(args: argparse.Namespace) -> int:
    from baselines.training.rollouts import HELDOUT_SUCCESS
    from baselines.training.trainer import Trainer

    config = _config(args, *([f"ray_address={args.ray}"] if args.ray else []))
    if config.learner_ranks > 1:
        from baselines.distributed.learner_group import train_on_ray

        history = train_on_ray(config, resume=args.resume, overwrite=args.overwrite)
    else:
        history = Trainer(config).run(resume=args.resume, overwrite=args.overwrite)
    last = history[-1] if history else {}
    print(
        f"run: {config.output_dir}  steps: {len(history)}  final reward: {last.get('reward_mean', float('nan')):.3f}  "
        f"held-out success: {last.get(HELDOUT_SUCCESS, float('nan')):.3f}"
    )
    print(f"metrics: {config.output_dir}/metrics.jsonl  curves: {config.output_dir}/curves.png")
    if config.about:
        print(f"what this run shows: {config.about}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    """The run's newest intact checkpoint, read from its folder (no trainer, no Ray)."""
    from baselines.training.rollouts import evaluate_run
    from baselines.training.run import Run

    config = _config(args)
    run = Run(config.output_dir, config)
    if not run.checkpoint_steps():
        print(f"no checkpoint in {run.checkpoints}; evaluating the initial policy", file=sys.stderr)
    print(json.dumps(evaluate_run(run, initial=True)))
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print(needs_extra("scope demo", "torch", "demo"), file=sys.stderr)
        return 2
    from baselines.apps.demo import run_demo, settings_from

    report = run_demo(settings_from(args))
    print(report.read_text())
    print(f"report: {report}\nplots:  {report.parent / 'curves.png'}\nruns:   {report.parent / 'runs'}")
    return 0


def _list_envs() -> int:
    from scope_envs.core.registration import REGISTERED

    if not REGISTERED:
        print("no environments registered")
    width = max((len(info.agent_id) for info in REGISTERED.values()), default=0)
    for info in REGISTERED.values():
        print(f"{info.agent_id:<{width}}  {info.description}  (user side: {info.user_id})")
    return 0


def _play(args: argparse.Namespace) -> int:
    from scope_envs.core.episodes import run_episodes
    from scope_envs.core.registration import find_env
    from scope_envs.core.specs import resolve_policy

    if args.opponent != "scripted":  # it names the other side of --human only
        raise UsageError("--opponent names the other side of --human; without --human, use --agent and --simulator")
    if args.episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {args.episodes}")
    info = find_env(args.env)
    envs = [info.make(**env_kwargs_of(args)) for _ in range(args.episodes)]
    options = {key: value for key, value in (("task_id", args.task_id), ("split", args.split)) if value is not None}
    policies = {
        side: resolve_policy(spec, env=envs[0], side=side)
        for side, spec in (("agent", args.agent), ("user", args.simulator))
    }
    players = "  ".join(
        f"{side}: {getattr(policy, 'name', None) or type(policy).__name__}" for side, policy in policies.items()
    )
    results = run_episodes(envs, policies, seeds=args.seed, options=options, rollout=args.rollout)
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
        print(f"=== episode {result.index}  scenario {result.scenario_id}  ({players}) ===")
        print(result.transcript)
        ended = "terminated" if result.terminated else "truncated"
        print(f"--- {ended}: {result.end_reason} after {result.turns} turns; rewards {result.rewards}")
        print(f"    agent reward breakdown: {result.reward_info['agent']['components']}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
