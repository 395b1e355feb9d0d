"""A run's files on disk: checkpoints verified by a manifest of sizes and SHA-256 digests, atomic
replacement of small files, and the metrics log, read back tolerantly after a crash."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

CHECKPOINT_MANIFEST = "manifest.json"  # every file of a checkpoint with its size and SHA-256, written last


def disk_megabytes(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def atomic_write(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)


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


def write_checkpoint_manifest(directory: Path, step: int) -> None:
    """Records every file of a checkpoint with its size and SHA-256 (and flushes each to disk)."""
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        files[path.relative_to(directory).as_posix()] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        _fsync_file(path)  # on disk before the manifest vouches for it
    manifest = directory / CHECKPOINT_MANIFEST
    manifest.write_text(json.dumps({"version": 1, "step": step, "files": files}, indent=1))
    _fsync_file(manifest)


def verify_checkpoint(directory: Path) -> str | None:
    """What is wrong with a checkpoint against its manifest (a missing, truncated or changed file), or None."""
    try:
        files = json.loads((directory / CHECKPOINT_MANIFEST).read_text())["files"]
        expected = {name: (int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()}
    except FileNotFoundError:
        return f"no {CHECKPOINT_MANIFEST} (damaged, or written by a version without checksums)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"unreadable {CHECKPOINT_MANIFEST} ({type(error).__name__})"
    for name, (size, digest) in expected.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {size}"
        if _sha256(path) != digest:
            return f"{name} does not match its checksum"
    return None


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def fsync_directory(path: Path) -> None:
    """Makes a rename inside `path` survive a power loss (where the OS allows opening directories)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
