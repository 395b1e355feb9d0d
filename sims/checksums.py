"""Checkpoint directories verified by a manifest of their files' sizes and SHA-256 digests.

A training checkpoint and a simulator pool's snapshot are each written into a temporary directory,
its files flushed to disk, the manifest written last, then renamed into place: a directory whose
files match its manifest is whole, and any other is damaged (a missing, truncated or changed file).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CHECKPOINT_MANIFEST = "manifest.json"  # every file of a checkpoint with its size and SHA-256, written last


def write_checkpoint_manifest(directory: Path, step: int) -> None:
    """Records every file of a checkpoint with its size and SHA-256 (and flushes each to disk)."""
    manifest = directory / CHECKPOINT_MANIFEST
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p != manifest):
        files[path.relative_to(directory).as_posix()] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        _fsync_file(path)  # on disk before the manifest vouches for it
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())
