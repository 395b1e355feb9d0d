"""`python -m scope_envs.p4g.fetch DIR`: the Persuasion for Good corpus from its official repository
into DIR, every file checked against its SHA-256; `--check DIR` checks a copy; `--url` names a
mirror of the repository's layout. Then `export SCOPE_P4G_DATA=DIR`."""

from __future__ import annotations

from collections.abc import Sequence

from scope_envs.core.data import data_command
from scope_envs.p4g.corpus import CORPUS, REPOSITORY_URL, fetch_corpus


def main(argv: Sequence[str] | None = None) -> int:
    return data_command(CORPUS, fetch_corpus, REPOSITORY_URL, argv)


if __name__ == "__main__":
    raise SystemExit(main())
