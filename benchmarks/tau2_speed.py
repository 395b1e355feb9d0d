"""tau2 reward and reset: this env against tau2's own code, measured in the same run.

    python benchmarks/tau2_speed.py [--tasks 10] [--resets 200] [--repeats 20]

For each domain, on the gold trajectories of `--tasks` tasks spread over the task list:

* reset: tau2 builds an environment per episode (`get_environment()`, which loads the database);
  this env's `reset(options={"task_id": ...})` forks the shared database copy-on-write;
* reward: tau2's `evaluate_simulation(..., EvaluationType.ALL)` and its `EnvironmentEvaluator.
  calculate_reward` (two environments built, the trajectory and the gold actions replayed, full
  database hashes) against this env's `evaluate()` with the task's gold end state cached (warm),
  and on a task's first episode, which computes that state (cold).

Every reward is checked to be identical between the two. Medians are printed with their ratio.
tau2's logging is silenced for both (it would otherwise print every tool response and slow tau2 down).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_domain(name: str, tasks: int, resets: int, repeats: int) -> dict[str, float]:
    import importlib
    import uuid

    from scope_envs.tau2 import require_tau2

    require_tau2()  # before tau2 is imported: silences tau2's debug logging, for tau2's timings as for ours
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    from scope_envs.tau2 import Tau2Env
    from scope_envs.tau2.parity import parity_cases, play

    tau2_domain = importlib.import_module(f"tau2.domains.{name}.environment")
    env = Tau2Env(domain=name)
    ids = env.task_ids("base")
    sample = ids[:: max(1, len(ids) // tasks)][:tasks]

    # reset
    tau2_reset = median_seconds(tau2_domain.get_environment, max(3, min(10, tasks)))
    cycle = iter(sample * (resets // len(sample) + 1))
    ours_reset = median_seconds(lambda: env.reset(options={"task_id": next(cycle)}), resets)

    # reward
    tau2_full, tau2_env, ours_warm, ours_cold = [], [], [], []
    for task_id in sample:
        task = env.domain.task(task_id)
        gold_case = next(case for case in parity_cases(env.domain, task) if case.name == "gold")
        episode = Tau2Env(domain=name)
        env.domain._gold.pop(task.id, None)  # measure the first episode of the task too
        start = time.perf_counter()
        ours_reward, _ = play(episode, task_id, gold_case)  # the episode's end computes the reward (cold)
        play_and_cold = time.perf_counter() - start
        ours_warm.append(median_seconds(episode.evaluate, repeats))
        ours_cold.append(play_and_cold)
        messages = episode.tau2_messages()
        run = SimulationRun(
            id=str(uuid.uuid4()),
            task_id=task.id,
            start_time="",
            end_time="",
            duration=0.0,
            termination_reason=TerminationReason.USER_STOP,
            messages=messages,
        )
        start = time.perf_counter()
        reference = evaluate_simulation(run, task, EvaluationType.ALL, solo_mode=False, domain=name)
        tau2_full.append(time.perf_counter() - start)
        start = time.perf_counter()
        EnvironmentEvaluator.calculate_reward(tau2_domain.get_environment, task, messages)
        tau2_env.append(time.perf_counter() - start)
        if reference.reward != ours_reward or episode.evaluate().reward != ours_reward:
            raise AssertionError(f"{name} task {task_id}: tau2 {reference.reward} != ours {ours_reward}")
    return {
        "tau2_reset": tau2_reset,
        "ours_reset": ours_reset,
        "tau2_reward": statistics.median(tau2_full),
        "tau2_env_reward": statistics.median(tau2_env),
        "ours_reward": statistics.median(ours_warm),
        "ours_first_episode": statistics.median(ours_cold),
        "tasks": len(sample),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10, help="gold trajectories per domain")
    parser.add_argument("--resets", type=int, default=200, help="resets of this env timed per domain")
    parser.add_argument("--repeats", type=int, default=20, help="timed evaluations of each trajectory by this env")
    args = parser.parse_args()
    for name in ("retail", "airline"):
        r = run_domain(name, args.tasks, args.resets, args.repeats)
        print(f"{name} ({r['tasks']} gold trajectories, identical rewards)")
        print(
            f"  reset   tau2 get_environment {r['tau2_reset'] * 1e3:9.2f} ms   "
            f"ours reset {r['ours_reset'] * 1e3:8.3f} ms   ratio {r['tau2_reset'] / r['ours_reset']:8.1f}x"
        )
        print(
            f"  reward  tau2 evaluate_simulation {r['tau2_reward'] * 1e3:7.1f} ms   "
            f"ours {r['ours_reward'] * 1e3:8.3f} ms   ratio {r['tau2_reward'] / r['ours_reward']:8.1f}x"
        )
        print(
            f"  reward  tau2 EnvironmentEvaluator {r['tau2_env_reward'] * 1e3:6.1f} ms   "
            f"ours {r['ours_reward'] * 1e3:8.3f} ms   ratio {r['tau2_env_reward'] / r['ours_reward']:8.1f}x"
        )
        print(
            f"  first episode of a task (whole episode incl. computing the gold state): "
            f"{r['ours_first_episode'] * 1e3:.2f} ms   ratio to tau2's reward alone "
            f"{r['tau2_reward'] / r['ours_first_episode']:.1f}x"
        )


if __name__ == "__main__":
    main()
