"""The rollout protocol played by rollout workers on Ray (see `scope_envs.core.rollout`).

A call splits the groups into tasks of `groups_per_task` consecutive groups, sends them to the
least busy of `workers` `RolloutWorker` actors, and returns the episodes in group order. Every
task is a pure function of the groups' seeds and players and of `(*key, first group)`, so:

* the episodes do not depend on the number of workers, nor on which worker played which task;
* a worker killed mid-task is restarted by Ray (`max_restarts`) and its unfinished tasks are
  re-run (`max_task_retries`), giving the very same episodes; each task's result is taken once,
  keyed by its groups, so no episode is lost or counted twice.

Players travel to the workers by pickle at every call, so a trained policy plays with its current
weights. Groups in which a language model being trained generates (a `TracedPolicy`: its
weights are large and its generation engine lives with the learner) are played in this process by
`local`, as are all groups of a call that has any: rollout workers take groups whose players are
all frozen or small (spec-built simulators, evaluation, act-level policies).

Vectorized rollouts that draw from `key` (a benchmark's own rollout) draw per task here, so their
samples differ from those of one in-process call over all groups (each is as random as the other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from baselines.distributed.rollout_worker import EnvSource, RolloutWorker
from baselines.training.rollouts import DEFAULT_ROLLOUT
from scope_envs.core.batch import TracedPolicy
from scope_envs.core.dialogue import DialogueEnv
from scope_envs.core.rollout import Episode, Rollout, RolloutGroup


class RayRollout:
    def __init__(
        self,
        env: EnvSource,
        env_kwargs: dict[str, Any] | None = None,
        *,
        local: Rollout,
        workers: int = 2,
        rollout: str = DEFAULT_ROLLOUT,
        groups_per_task: int = 1,
        observe: bool = False,
        cpus_per_worker: float = 1.0,
        max_restarts: int = 3,
        max_task_retries: int = 3,
        worker_options: Sequence[dict[str, Any]] = (),
    ) -> None:
        """`worker_options[i]` are extra Ray actor options of worker i (e.g. a node's resource,
        or a scheduling strategy); `observe`: the workers keep each episode's conversation
        (`baselines.training.episodes.observed`); Ray must be connected (`baselines.distributed.cluster.connect`)."""
        import ray

        if workers < 1 or groups_per_task < 1:
            raise ValueError(f"RayRollout needs workers and groups_per_task >= 1, not {workers}, {groups_per_task}")
        self.local = local
        self.groups_per_task = groups_per_task
        actor = ray.remote(RolloutWorker)
        self.workers = [
            actor.options(
                num_cpus=cpus_per_worker,
                max_restarts=max_restarts,
                max_task_retries=max_task_retries,
                **(dict(worker_options[i]) if i < len(worker_options) else {}),
            ).remote(env, env_kwargs, rollout, observe=observe)
            for i in range(workers)
        ]

    def __call__(
        self,
        make_env: Callable[[], DialogueEnv],
        groups: Sequence[RolloutGroup],
        *,
        group_size: int,
        split: str,
        key: Sequence[int] = (),
        before_turn: Callable[[], None] | None = None,
    ) -> list[Episode]:
        """The rollout protocol; `make_env` serves only groups played here (the workers build their
        own envs), `before_turn` is called once here before the groups are sent."""
        if any(isinstance(player, TracedPolicy) for group in groups for player in group.players.values()):
            return self.local(make_env, groups, group_size=group_size, split=split, key=key, before_turn=before_turn)
        if before_turn is not None:
            before_turn()
        return self.play_remote(groups, group_size=group_size, split=split, key=key)

    def play_remote(
        self, groups: Sequence[RolloutGroup], *, group_size: int, split: str, key: Sequence[int] = ()
    ) -> list[Episode]:
        import ray

        shared = ray.put(list(groups))  # one pickle: players shared between groups stay one object
        tasks = [
            list(range(start, min(start + self.groups_per_task, len(groups))))
            for start in range(0, len(groups), self.groups_per_task)
        ]
        by_task: dict[int, list[Episode]] = {}
        running: dict[Any, tuple[int, int]] = {}  # result ref -> (task, worker)
        idle = list(range(len(self.workers)))
        queued = list(range(len(tasks)))
        while queued or running:
            while queued and idle:
                task, worker = queued.pop(0), idle.pop(0)
                ref = self.workers[worker].play_groups.remote(
                    shared, tasks[task], group_size=group_size, split=split, key=tuple(key)
                )
                running[ref] = (task, worker)
            done, _ = ray.wait(list(running), num_returns=1)
            task, worker = running.pop(done[0])
            by_task[task] = ray.get(done[0])
            idle.append(worker)
        return [episode for task in range(len(tasks)) for episode in by_task[task]]

    def worker_pids(self) -> list[int]:
        import ray

        return ray.get([worker.pid.remote() for worker in self.workers])

    def close(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker)
        self.workers = []
