"""τ³-bench 1.0.0's retail and airline task files, which SCOPE does not ship.

They are read from the folder named by `$SCOPE_TAU3_DATA` (holding `retail_tasks.json` and
`airline_tasks.json`); without it, from the user cache (`$XDG_CACHE_HOME/scope/tau3/v1.0.0`), where
they are fetched once from tau2-bench's repository at the tag v1.0.0 (`$SCOPE_TAU3_URL` names a
mirror of that tag's layout). Wherever they come from, each file must have its git blob id at that
tag, so a task set always means the same tasks.
"""

from __future__ import annotations

import os
from pathlib import Path

from scope_envs.core.data import DataSet, fetch_files, git_blob_id, user_cache

TAG = "v1.0.0"
URL_SETTING = "SCOPE_TAU3_URL"
REPOSITORY_URL = f"https://raw.githubusercontent.com/sierra-research/tau2-bench/{TAG}/"
# Each file of a copy, and its path in the repository.
UPSTREAM_PATHS = {
    "retail_tasks.json": "data/tau2/domains/retail/tasks.json",
    "airline_tasks.json": "data/tau2/domains/airline/tasks.json",
}
TASKS = DataSet(
    title="τ³-bench 1.0.0's retail and airline tasks",
    setting="SCOPE_TAU3_DATA",
    home=f"github.com/sierra-research/tau2-bench at tag {TAG}, data/tau2/domains/*/tasks.json, MIT",
    checksums={
        "retail_tasks.json": "e95a9f898b2d1f6568ea8faec78edc3767ce747d",
        "airline_tasks.json": "ea4ff5e3f5e3d97ca391846a6e8dd9eb3437dc80",
    },
    fetch_module="scope_envs.tau2.fetch",
    digest=git_blob_id,
)


def cache_dir() -> Path:
    return user_cache("tau3") / TAG


def fetch_tasks(folder: Path, repository_url: str = REPOSITORY_URL, *, timeout: float = 60.0) -> Path:
    """Downloads both task files from the repository at the tag (or a mirror) into `folder`, kept
    only when both have their git blob ids."""
    base = repository_url.rstrip("/") + "/"
    return fetch_files(TASKS, {name: base + path for name, path in UPSTREAM_PATHS.items()}, folder, timeout=timeout)


def task_file(domain: str) -> Path:
    """The checked τ³ task file of `domain`: from `$SCOPE_TAU3_DATA`, else the cache, fetched once."""
    name = f"{domain}_tasks.json"
    configured = TASKS.configured()
    folder = configured or cache_dir()
    if configured is None and TASKS.problems(folder):
        fetch_tasks(folder, os.environ.get(URL_SETTING) or REPOSITORY_URL)
    problems = TASKS.problems(folder, [name])
    if problems:
        where = f"{TASKS.setting}={folder}" if configured else f"the cached copy in {folder}"
        raise TASKS.error(f"{where}: " + "; ".join(problems))
    return folder / name
