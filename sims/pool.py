"""`CheckpointPool`: a FIFO pool of simulator checkpoints on disk, sampled once per rollout group.

Every checkpoint lives in its own directory (`ckpt-000007/`), written under a temporary name with
the manifest of its files' checksums (`sims.checksums`, as a training checkpoint) and renamed into
place, and the pool's manifest (`pool.json`) is replaced atomically after each change, so a crash at
any point leaves a pool that reopens as it was before the change or after it. Directories the pool's
manifest does not name (a half-written checkpoint, one evicted just before a crash) are removed
when the pool is opened. A member is checked against its checksums before it is first loaded: a
damaged one raises `DamagedSnapshot`, never loads. A member's `id` never repeats: use it as the
adapter name when serving LoRA adapters (vLLM caches adapters by name).

A trainer that resumes from a checkpoint older than the pool's last changes opens the pool with
`retain_evicted=True`: evicted members then stay on disk (listed as retired in the manifest) until
`purge_evicted(step)` is called once no checkpoint a resume may start from is older than `step`,
so `drop_after` can restore the pool exactly as it was at any step since then.

A pool opened with `read_only=True` is another process's view of a pool that one writer keeps
(the ranks of a data-parallel learner): it changes nothing on disk, and `refresh()` re-reads the
members from the manifest after the writer's changes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.core.failpoints import failpoint
from sims.checksums import fsync_directory, verify_checkpoint, write_checkpoint_manifest

MANIFEST = "pool.json"
SAMPLING = ("uniform", "latest")  # a uniform draw per group, or always the newest candidate


class DamagedSnapshot(RuntimeError):
    """A pool member whose files do not match its checksums (or that has none): it is not loaded."""


@dataclass(frozen=True)
class PoolMember:
    id: str
    step: int
    added_at: float
    meta: dict[str, Any] = field(default_factory=dict)


class CheckpointPool:
    """See the module docstring. `loader(path) -> simulator` turns a member into a policy."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_size: int = 10,
        sampling: str = "uniform",
        loader: Callable[[Path], Any] | None = None,
        retain_evicted: bool = False,
        read_only: bool = False,
    ) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        if sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {SAMPLING}, got {sampling!r}")
        self.root = Path(root)
        self.read_only = read_only
        if not read_only:
            self.root.mkdir(parents=True, exist_ok=True)
        self.max_size = max_size
        self.sampling = sampling
        self.loader = loader
        self.retain_evicted = retain_evicted
        self._members: list[PoolMember] = []
        self._evicted: list[tuple[PoolMember, int]] = []  # (member, step it was evicted at), kept on disk
        self._next_id = 0
        self._loaded: dict[str, Any] = {}
        self._verified: set[str] = set()  # a member never changes once written: checked once per process
        self._open()

    @property
    def members(self) -> list[PoolMember]:
        return list(self._members)

    def path(self, member: PoolMember) -> Path:
        return self.root / member.id

    def add(
        self, write: Callable[[Path], None] | str | os.PathLike[str], *, step: int, meta: dict[str, Any] | None = None
    ) -> PoolMember:
        """Adds a checkpoint: `write(directory)` saves into a fresh directory, or an existing
        checkpoint directory is copied in. The oldest members beyond `max_size` are evicted."""
        self._check_writable()
        member = PoolMember(id=f"ckpt-{self._next_id:06d}", step=step, added_at=time.time(), meta=dict(meta or {}))
        staging = Path(tempfile.mkdtemp(prefix=f".{member.id}.", dir=self.root))
        try:
            if callable(write):
                write(staging)
            else:
                shutil.copytree(write, staging, dirs_exist_ok=True)
            write_checkpoint_manifest(staging, step)
            staging.rename(self.path(member))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_directory(self.root)
        self._next_id += 1
        self._members.append(member)
        evicted, self._members = self._members[: -self.max_size], self._members[-self.max_size :]
        if self.retain_evicted:
            self._evicted.extend((old, step) for old in evicted)
        self._write_manifest()
        if not self.retain_evicted:
            for old in evicted:
                shutil.rmtree(self.path(old), ignore_errors=True)
        return member

    def sample(self, rng: np.random.Generator, *, include_live: bool = False) -> PoolMember | None:
        """The member that plays the user for one rollout group. With `include_live`, the live
        policy (newer than every member) is a candidate too, and None means it was drawn.
        `sampling="latest"` always takes the newest candidate; `"uniform"` draws one uniformly."""
        candidates = len(self._members) + int(include_live)
        if candidates == 0:
            raise RuntimeError("the pool is empty: add the initial simulator first")
        index = candidates - 1 if self.sampling == "latest" else int(rng.integers(candidates))
        return self._members[index] if index < len(self._members) else None

    def load(self, member: PoolMember) -> Any:
        """The member as a simulator, through `loader`, once it matches its checksums (else
        `DamagedSnapshot`); loaded members are kept until `release()`."""
        if self.loader is None:
            raise RuntimeError("this pool has no loader: pass loader=... to turn checkpoints into simulators")
        if member.id not in self._loaded:
            problem = self.damage(member)
            if problem is not None:
                raise DamagedSnapshot(problem)
            self._loaded[member.id] = self.loader(self.path(member))
        return self._loaded[member.id]

    def damage(self, member: PoolMember) -> str | None:
        """What is wrong with a member against its checksums, in a sentence naming it, or None."""
        if member.id in self._verified:
            return None
        problem = verify_checkpoint(self.path(member))
        if problem is not None:
            return f"simulator pool snapshot {member.id} (step {member.step}) in {self.root} is damaged: {problem}"
        self._verified.add(member.id)
        return None

    def release(self) -> None:
        """Forgets the loaded members (e.g. after each training step, when the pool may change),
        closing those that hold resources (`close()`, such as an adapter loaded on a shared base)."""
        for loaded in self._loaded.values():
            close = getattr(loaded, "close", None)
            if callable(close):
                close()
        self._loaded.clear()

    def drop_after(self, step: int) -> list[PoolMember]:
        """The pool as it was after training step `step` (a resumed run replays the later steps):
        removes members added later and restores retained members evicted later."""
        self._check_writable()
        dropped = [m for m in self._members if m.step > step]
        dropped += [m for m, _ in self._evicted if m.step > step]  # added and evicted since: never existed
        restored = [m for m, evicted_at in self._evicted if evicted_at > step and m.step <= step]
        if dropped or restored:
            kept = [m for m in self._members if m.step <= step]
            self._members = sorted(restored + kept, key=lambda m: int(m.id.removeprefix("ckpt-")))
            self._evicted = [(m, at) for m, at in self._evicted if at <= step]
            self._write_manifest()
            for member in dropped:
                shutil.rmtree(self.path(member), ignore_errors=True)
        return dropped

    def purge_evicted(self, step: int) -> None:
        """Deletes retained members evicted at or before `step` (a checkpoint at `step` is written)."""
        self._check_writable()
        purged = [m for m, evicted_at in self._evicted if evicted_at <= step]
        if purged:
            self._evicted = [(m, at) for m, at in self._evicted if at > step]
            self._write_manifest()
            for member in purged:
                shutil.rmtree(self.path(member), ignore_errors=True)

    def ages(self, step: int) -> list[int]:
        """How many training steps old each member is at `step`, oldest first."""
        return [step - member.step for member in self._members]

    def refresh(self) -> None:
        """Re-reads the members from the manifest (a read-only pool, after its writer's changes)."""
        self.release()
        self._read_manifest()

    def _check_writable(self) -> None:
        if self.read_only:
            raise RuntimeError(f"checkpoint pool at {self.root} is opened read-only: its writer changes it")

    def _read_manifest(self) -> None:
        try:
            data = json.loads((self.root / MANIFEST).read_text())
        except FileNotFoundError:  # no pool yet (or its writer is replacing it: a reader refreshes later)
            data = {"members": [], "next_id": 0}
        self._members = [PoolMember(**m) for m in data["members"]]
        self._evicted = [(PoolMember(**m["member"]), int(m["evicted_at"])) for m in data.get("evicted", [])]
        self._next_id = int(data["next_id"])

    def _open(self) -> None:
        self._read_manifest()
        if self.read_only:
            return
        known = {m.id for m in self._members} | {m.id for m, _ in self._evicted} | {MANIFEST}
        for entry in self.root.iterdir():
            if entry.name not in known and (
                entry.name.startswith(("ckpt-", ".ckpt-")) or entry.name.startswith(f".{MANIFEST}")
            ):
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        missing = [m.id for m in self._members if not self.path(m).is_dir()]
        if missing:
            raise RuntimeError(f"checkpoint pool at {self.root}: the manifest names missing checkpoints {missing}")

    def _write_manifest(self) -> None:
        payload = {
            "version": 1,
            "next_id": self._next_id,
            "max_size": self.max_size,
            "members": [asdict(m) for m in self._members],
            "evicted": [{"member": asdict(m), "evicted_at": at} for m, at in self._evicted],
        }
        with tempfile.NamedTemporaryFile("w", dir=self.root, prefix=f".{MANIFEST}.", delete=False) as handle:
            json.dump(payload, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        failpoint("pool_manifest", max((m.step for m in self._members), default=0))
        os.replace(handle.name, self.root / MANIFEST)
