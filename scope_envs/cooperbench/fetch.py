"""`python -m scope_envs.cooperbench.fetch DIR`: the CooperBench dataset from its repository's
archive at the pinned commit into DIR, the files this env reads each checked against
`dataset.sha256`; `--check DIR` checks a copy; `--url` names a copy of the archive. Then
`export SCOPE_COOPERBENCH_DATA=DIR`."""

from __future__ import annotations

from collections.abc import Sequence

from scope_envs.cooperbench.dataset import DATASET, DATASET_URL, fetch_dataset
from scope_envs.core.data import data_command


def main(argv: Sequence[str] | None = None) -> int:
    return data_command(DATASET, fetch_dataset, DATASET_URL, argv)


if __name__ == "__main__":
    raise SystemExit(main())
