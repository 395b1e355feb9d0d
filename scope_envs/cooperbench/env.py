"""`CooperBenchEnv`: two coding agents, one feature each, one merged patch, hidden tests.

CooperBench (arXiv 2601.13295) as a two-sided dialogue: the agent side implements the first
feature of a pair, the user side the second, each in its own sandboxed copy of the repository.
Text turns are messages between the two; tool calls act on the caller's own workspace and keep
the turn. The episode ends (terminated) when both sides have called `finish` and sent their last
message; limits on turns, errors, tool calls per turn and wall time truncate it. Either way, each
workspace's diff (test files left out) is merged with the other as CooperBench merges, and both
features' hidden tests run on the merged code. Reward, shared: 1 when both suites pass, else 0
(optionally 0.5 for a side whose own feature passes).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.cooperbench.dataset import (
    NON_PYTHON,
    PairItem,
    iter_items,
    load_task,
    locate_dataset,
    parse_item_id,
    task_names,
)
from scope_envs.cooperbench.evaluation import Evaluation, Evaluator
from scope_envs.cooperbench.patches import filter_test_files
from scope_envs.cooperbench.prompts import TOOLS, coder_prompt
from scope_envs.cooperbench.sandbox import Limits, probe_isolation
from scope_envs.cooperbench.sources import KNOWN_SDISTS, resolve_source, test_environment
from scope_envs.cooperbench.workspace import Workspace
from scope_envs.core.chat import Message, ToolCall
from scope_envs.core.dialogue import AGENT, SIDES, USER, DialogueEnv, EpisodeEnd, Reward, Scenario
from scope_envs.core.tools import ToolError

SPLITS = ("train", "test")


class CooperBenchEnv(DialogueEnv):
    """CooperBench; see the module docstring and docs/envs/cooperbench.md."""

    metadata = {**DialogueEnv.metadata, "name": "cooperbench_v0"}  # noqa: RUF012
    scripted_policies = {  # noqa: RUF012
        "agent": "scope_envs.cooperbench.scripted:GoldPatchCoder",
        "user": "scope_envs.cooperbench.scripted:GoldPatchCoder",
    }

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        tasks: Sequence[str] | None = None,
        pairs: Sequence[str] | None = None,
        checkouts: Mapping[str, str | os.PathLike[str]] | None = None,
        online: bool = False,
        download: bool = False,
        partial_credit: bool = False,
        command_timeout: float = 120.0,
        test_timeout: float = 300.0,
        max_wall_seconds: float = 3600.0,
        limits: Limits | None = None,
        workdir: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("max_turns", 40)
        kwargs.setdefault("max_tool_calls_per_turn", 50)
        kwargs.setdefault("max_errors", 50)
        kwargs.setdefault("max_context_tokens", 400_000)
        super().__init__(**kwargs)
        self.data_dir = locate_dataset(data_dir, download=download)
        self.partial_credit = partial_credit
        self.command_timeout = command_timeout
        self.max_wall_seconds = max_wall_seconds
        self.limits = limits or Limits()
        self.test_limits = Limits(wall_seconds=test_timeout, cpu_seconds=int(test_timeout))
        self.workdir = Path(workdir) if workdir is not None else None
        self.cache = Path(cache_dir) if cache_dir is not None else None
        self.isolation = probe_isolation()
        if tasks is not None:
            names = list(tasks)
        elif pairs is not None:
            names = sorted({parse_item_id(p)[0] for p in pairs})
        else:
            names = self._default_tasks(checkouts or {}, online)
        self.evaluators: dict[str, Evaluator] = {}
        runnable: dict[str, set[int]] = {}
        for name in names:
            task = load_task(self.data_dir, name)
            source = resolve_source(task, checkouts=checkouts, online=online, cache=self.cache)
            environment = test_environment(task, source, cache=self.cache)
            evaluator = Evaluator(
                task, source, environment, scratch=self.workdir, limits=self.test_limits, hidden=(self.data_dir,)
            )
            self.evaluators[name] = evaluator
            runnable[name] = {number for number in task.features if evaluator.accepts(number)}
        items = list(iter_items(self.data_dir, names, runnable))
        if pairs is not None:
            wanted = set(pairs)
            items = [item for item in items if item.item_id in wanted]
            missing = wanted - {item.item_id for item in items}
            if missing:
                raise ValueError(f"pairs not runnable on the available sources: {sorted(missing)}")
        if not items:
            raise ValueError(f"no runnable CooperBench pairs among tasks {names}")
        self.items = items
        self._by_id = {item.item_id: item for item in items}
        self._by_split = {split: [item for item in items if item.split == split] for split in SPLITS}
        self.workspaces: dict[str, Workspace] = {}
        self.finished: dict[str, bool] = dict.fromkeys(SIDES, False)
        self.last_evaluation: Evaluation | None = None
        self._episode_dir: Path | None = None
        self._cleanup: weakref.finalize | None = None
        self._started = 0.0

    def _default_tasks(self, checkouts: Mapping[str, Any], online: bool) -> list[str]:
        """Python tasks with a source reachable without asking: a checkout, a known sdist, or online."""
        names = []
        for name in task_names(self.data_dir):
            repo = name.split("/")[0]
            if repo in NON_PYTHON:
                continue
            if repo in checkouts or repo in KNOWN_SDISTS or online:
                names.append(name)
        return names

    def task_ids(self, split: str = "train") -> list[str]:
        """The pair ids of a split (`"train"`, or `"test"`: the pairs of CooperBench's lite subset)."""
        if split not in self._by_split:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        return [item.item_id for item in self._by_split[split]]

    # ---- episode -------------------------------------------------------------------------------------

    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        item = self._choose(rng, options)
        self._close_workspaces()
        self._episode_dir = Path(tempfile.mkdtemp(prefix="cooperbench-", dir=self._ensure_workdir()))
        os.chmod(self._episode_dir, 0o711)
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self._episode_dir), True)
        evaluator = self.evaluators[item.task.name]
        features = {AGENT: item.first, USER: item.second}
        prompts = {}
        for side in SIDES:
            self.workspaces[side] = Workspace(
                evaluator.source,
                evaluator.environment,
                self._episode_dir,
                side,
                limits=self.limits,
                hidden=(self.data_dir,),
            )
            feature = item.task.features[features[side]]
            prompts[side] = coder_prompt(
                item.task.name, item.task.url, feature.number, feature.description, evaluator.source.origin
            )
        self.finished = dict.fromkeys(SIDES, False)
        self.last_evaluation = None
        self._started = time.monotonic()
        return Scenario(
            scenario_id=item.item_id,
            system_prompts=prompts,
            tools={side: TOOLS for side in SIDES},
            first_speaker=AGENT,
            data={"item": item},
            metadata={
                "split": item.split,
                "task": item.task.name,
                "features": {AGENT: item.first, USER: item.second},
                "source": evaluator.source.origin,
                "sandbox": self.isolation.describe(),
            },
        )

    def _choose(self, rng: np.random.Generator, options: Mapping[str, Any]) -> PairItem:
        task_id = options.get("task_id")
        if task_id is not None:
            if task_id not in self._by_id:
                raise ValueError(f"unknown or unrunnable CooperBench task_id {task_id!r}")
            return self._by_id[task_id]
        split = options.get("split", "train")
        candidates = self._by_split.get(split)
        if candidates is None:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if not candidates:
            candidates = self.items  # a task list without lite pairs still plays
        return candidates[int(rng.integers(len(candidates)))]

    def _ensure_workdir(self) -> Path | None:
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        return self.workdir

    def limit_reached(self) -> EpisodeEnd | None:
        if time.monotonic() - self._started > self.max_wall_seconds:
            return EpisodeEnd(
                "wall_time", terminated=False, detail=f"the episode ran over {self.max_wall_seconds:.0f} s"
            )
        return None

    # ---- tools ---------------------------------------------------------------------------------------

    def call_tool(self, side: str, call: ToolCall) -> str:
        args = call.args
        if call.name == "finish":
            if self.finished[side]:
                raise ToolError("you have already finished")
            self.finished[side] = True
            waiting = "" if all(self.finished.values()) else " Your teammate is still working."
            return f"Your work is submitted and your repository is frozen.{waiting} Now send a last message."
        if self.finished[side]:
            raise ToolError("you have finished: your repository is frozen; reply with a message instead")
        workspace = self.workspaces[side]
        if call.name == "list_files":
            return workspace.list_files(args.get("path", "."), int(args.get("max_depth", 2)))
        if call.name == "read_file":
            return workspace.read_file(args["path"], args.get("start_line"), args.get("end_line"))
        if call.name == "write_file":
            return workspace.write_file(args["path"], args["content"])
        if call.name == "replace_in_file":
            return workspace.replace_in_file(args["path"], args["old"], args["new"], bool(args.get("replace_all")))
        if call.name == "run_command":
            return self._run_command(workspace, args)
        raise ToolError(f"'{call.name}' is not a CooperBench tool")

    def _run_command(self, workspace: Workspace, args: Mapping[str, Any]) -> str:
        remaining = self.max_wall_seconds - (time.monotonic() - self._started)
        timeout = min(float(args.get("timeout_seconds", self.command_timeout)), self.command_timeout, remaining)
        if timeout < 1:
            raise ToolError("no wall time is left in this episode")
        result = workspace.run(args["command"], timeout)
        note = "\n[output truncated]" if result.truncated else ""
        if not result.ok:
            raise ToolError(f"command failed ({result.describe()})\n{result.output}{note}")
        return f"{result.output}{note}" if result.output else "(no output; exit status 0)"

    # ---- ending --------------------------------------------------------------------------------------

    def end_reason(self, side: str, message: Message) -> str | None:
        return "both_finished" if all(self.finished.values()) else None

    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        assert self.scenario is not None
        item: PairItem = self.scenario.data["item"]
        evaluator = self.evaluators[item.task.name]
        try:
            patches = {side: self.workspaces[side].diff() for side in SIDES}
            evaluation = evaluator.evaluate(patches[AGENT], item.first, patches[USER], item.second)
        except Exception as error:  # grading infrastructure failing is reported, never raised into the loop
            failure = {"error": f"evaluation failed: {type(error).__name__}: {error}"}
            zero = {"both_passed": 0.0, "own_passed": 0.0, "partner_passed": 0.0, "merged": 0.0}
            return {side: Reward(0.0, zero, failure) for side in SIDES}
        evaluation.extra["patches"] = patches
        self.last_evaluation = evaluation
        own = {AGENT: item.first, USER: item.second}
        both = evaluation.both_passed
        breakdown = evaluation.to_info()
        rewards = {}
        for side in SIDES:
            partner = USER if side == AGENT else AGENT
            own_passed = evaluation.suites[own[side]].passed
            value = 1.0 if both else (0.5 if self.partial_credit and own_passed else 0.0)
            components = {
                "both_passed": float(both),
                "own_passed": float(own_passed),
                "partner_passed": float(evaluation.suites[own[partner]].passed),
                "merged": float(evaluation.merge.status != "conflict"),
            }
            details = {
                **breakdown,
                "finished": dict(self.finished),
                "patch_lines": {s: len(filter_test_files(patches[s]).splitlines()) for s in SIDES},
                "partial_credit": self.partial_credit,
            }
            rewards[side] = Reward(value, components, details)
        return rewards

    def _close_workspaces(self) -> None:
        for workspace in self.workspaces.values():
            workspace.close()
        self.workspaces = {}
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None

    def close(self) -> None:
        self._close_workspaces()


def parallel_env(**kwargs: Any) -> CooperBenchEnv:
    """The PettingZoo parallel env (`possible_agents == ["agent", "user"]`)."""
    return CooperBenchEnv(**kwargs)
