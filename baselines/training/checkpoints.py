"""A run's files on disk: checkpoints verified by a manifest of sizes and SHA-256 digests (`sims.checksums`,
shared with the simulator pool's snapshots), atomic replacement of small files, and the metrics log, read
back tolerantly after a crash."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from scope_envs.core.files import atomic_write
from sims.checksums import CHECKPOINT_MANIFEST, fsync_directory, verify_checkpoint, write_checkpoint_manifest

__all__ = [
    "CHECKPOINT_MANIFEST",
    "atomic_write",
    "checkpoint_steps",
    "disk_megabytes",
    "fsync_directory",
    "read_metrics",
    "remove_path",
    "saved_work",
    "verify_checkpoint",
    "write_checkpoint_manifest",
]


def disk_megabytes(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The metrics records of a run; a line cut short by a crash while it was written is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def saved_work(output: Path) -> str | None:
    """What an earlier run saved in `output` (its checkpoints, its metrics), in words; None if nothing."""
    found = []
    steps = checkpoint_steps(output / "checkpoints")
    if steps:
        found.append(f"checkpoints up to step {max(steps)}")
    records = read_metrics(output / "metrics.jsonl")
    if records:
        found.append(f"metrics of {len(records)} steps")
    return " and ".join(found) or None


def checkpoint_steps(checkpoints: Path) -> dict[int, Path]:
    """The checkpoint directories (`step-000042`) by step."""
    if not checkpoints.is_dir():
        return {}
    matches = ((re.fullmatch(r"step-(\d+)", p.name), p) for p in checkpoints.iterdir() if p.is_dir())
    return {int(match.group(1)): path for match, path in matches if match}


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
