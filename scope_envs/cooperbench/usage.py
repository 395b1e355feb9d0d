"""What a sandboxed run uses, polled from outside: resident memory of its processes, bytes on disk.

Polling is the fallback where no cgroup caps the run as a whole (sandbox.py): it sees a run's
processes by their user id (a dedicated sandbox user) or by their session, and counts resident
pages of each process (shared pages once per process, an overestimate) and allocated blocks of
each file (hard links once, sparse holes not at all).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(*, uid: int | None = None, session: int | None = None) -> int:
    """Resident memory of the processes of `uid`, or else of session `session`."""
    total = 0
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            if uid is not None:
                if entry.stat().st_uid != uid:
                    continue
            elif session is None or _session_of(entry.path) != session:
                continue
            with open(f"{entry.path}/statm", "rb") as handle:
                total += int(handle.read().split()[1]) * PAGE_BYTES
        except (OSError, ValueError, IndexError):
            continue  # the process ended meanwhile
    return total


def _session_of(proc: str) -> int:
    with open(f"{proc}/stat", "rb") as handle:
        after_name = handle.read().rsplit(b")", 1)[1].split()
    return int(after_name[3])  # state, ppid, pgrp, session


def disk_bytes(paths: Iterable[Path]) -> int:
    """Bytes allocated under `paths` (symbolic links not followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    pending = [str(path) for path in paths]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    return total


class Watch:
    """Checks a running sandbox against its whole-run caps; `check` names the first one exceeded.

    Memory (None: a cgroup caps it) is checked at every call; disk at most every `interval`
    seconds and at least every twentieth of the time a walk of the tree takes (a big tree costs
    at most 5% of a core), the first time one interval after the start, so that a quick `rm`
    can still free an over-full workspace.
    """

    interval = 0.2  # how often the sandbox calls `check` at most

    def __init__(
        self,
        *,
        memory_bytes: int | None,
        uid: int | None,
        disk_paths: list[Path],
        disk_cap: int,
    ) -> None:
        self.memory_bytes = memory_bytes
        self.uid = uid
        self.session: int | None = None
        self.disk_paths = disk_paths
        self.disk_cap = disk_cap
        self.next_disk_check: float | None = None

    def check(self, now: float) -> str | None:
        if self.memory_bytes is not None and resident_bytes(uid=self.uid, session=self.session) > self.memory_bytes:
            return "memory"
        if self.next_disk_check is None:
            self.next_disk_check = now + self.interval
        elif now >= self.next_disk_check:
            used = disk_bytes(self.disk_paths)
            self.next_disk_check = now + max(self.interval, 20 * (time.monotonic() - now))
            if used > self.disk_cap:
                return "disk"
        return None
