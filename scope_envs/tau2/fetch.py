"""`python -m scope_envs.tau2.fetch DIR`: τ³-bench 1.0.0's retail and airline task files from
tau2-bench's repository at the tag v1.0.0 into DIR, each checked against its git blob id;
`--check DIR` checks a copy; `--url` names a mirror. Then `export SCOPE_TAU3_DATA=DIR` (without
it, `task_set="tau3"` fetches them once into the user cache)."""

from __future__ import annotations

from collections.abc import Sequence

from scope_envs.core.data import data_command
from scope_envs.tau2.tau3 import REPOSITORY_URL, TASKS, fetch_tasks


def main(argv: Sequence[str] | None = None) -> int:
    return data_command(TASKS, fetch_tasks, REPOSITORY_URL, argv)


if __name__ == "__main__":
    raise SystemExit(main())
