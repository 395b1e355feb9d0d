"""Third-party data a benchmark reads and SCOPE never ships: its one setting, its home, its checksums.

A benchmark describes each such data set with a `DataSet`: the environment variable that names a
local copy (a folder), where the official files live and under which license, and the checksum
of every file it reads. `fetch_files` downloads files and keeps them only when every checksum
matches; `data_command` is the benchmark's `python -m <benchmark>.fetch DIR` (and `--check DIR`).
A data set that is absent or not the official one is a `MissingDataError`, whose message is one
line naming the setting to set and where the data comes from.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scope_envs.core.files import atomic_write


class MissingDataError(FileNotFoundError):
    """A data set is absent, or a copy is not the official files; the message, one line, says what to set."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_blob_id(data: bytes) -> str:
    """What `git hash-object` prints for a file holding `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def user_cache(name: str) -> Path:
    """`$XDG_CACHE_HOME/scope/<name>` (by default `~/.cache/scope/<name>`)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scope" / name


@dataclass(frozen=True)
class DataSet:
    """A data set a benchmark reads: `checksums` maps each file's path in a copy to its digest."""

    title: str  # what the data is, as a sentence names it
    setting: str  # the environment variable naming a folder that holds a copy
    home: str  # where the official files live, and their license
    checksums: Mapping[str, str]
    fetch_module: str  # `python -m <fetch_module> DIR` writes a checked copy into DIR
    digest: Callable[[bytes], str] = sha256

    @property
    def fetch_command(self) -> str:
        return f"python -m {self.fetch_module} DIR"

    def configured(self) -> Path | None:
        """The folder the setting names, or None when it is unset or empty."""
        value = os.environ.get(self.setting)
        return Path(value).expanduser() if value else None

    def problems(self, folder: Path, names: Sequence[str] | None = None) -> list[str]:
        """What keeps `folder` from being a copy of the official files (of `names`, else of all)."""
        found = []
        for name in names or list(self.checksums):
            path = folder / name
            if not path.is_file():
                found.append(f"{name} is missing")
            elif self.digest(path.read_bytes()) != self.checksums[name]:
                found.append(f"{name} is not the official file")
        return found

    def message(self, what_happened: str) -> str:
        """One line: what happened, the setting to set, where the data comes from, how to fetch it."""
        return (
            f"{what_happened}. Set {self.setting} to a folder holding {self.title} ({self.home}); "
            f"`{self.fetch_command}` makes a checked copy"
        )

    def error(self, what_happened: str) -> MissingDataError:
        return MissingDataError(self.message(what_happened))


def read_url(url: str, timeout: float = 60.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # a data set's home, or a mirror the user named
        return response.read()


def keep_checked(dataset: DataSet, payloads: Mapping[str, bytes], folder: Path, origins: Mapping[str, str]) -> Path:
    """Writes the files into `folder` only when every one of them is the official file."""
    for name, data in payloads.items():
        if dataset.digest(data) != dataset.checksums[name]:
            raise dataset.error(f"{origins[name]} is not the official {name} (checksum {dataset.digest(data)})")
    for name, data in payloads.items():
        atomic_write(folder / name, data)
    return folder


def fetch_files(dataset: DataSet, urls: Mapping[str, str], folder: Path, *, timeout: float = 60.0) -> Path:
    """Downloads each file (`name -> URL`) and keeps the set in `folder` when every file is the official one."""
    payloads = {}
    for name, url in urls.items():
        try:
            payloads[name] = read_url(url, timeout)
        except OSError as error:  # URLError and HTTPError are OSErrors
            raise dataset.error(f"could not download {url} ({error})") from error
    return keep_checked(dataset, payloads, folder, urls)


def data_command(
    dataset: DataSet, fetch: Callable[[Path, str], object], official_url: str, argv: Sequence[str] | None = None
) -> int:
    """`python -m <benchmark>.fetch DIR [--url URL]` fetches and checks a copy; `--check DIR` checks one."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {dataset.fetch_module}",
        description=f"Download {dataset.title} from {dataset.home} into DIR and check every file's checksum.",
    )
    parser.add_argument("folder", type=Path, metavar="DIR", help="where to write the copy (with --check: the copy)")
    parser.add_argument("--check", action="store_true", help="only check the copy in DIR; download nothing")
    parser.add_argument("--url", default=official_url, help=f"download from this mirror (default {official_url})")
    args = parser.parse_args(argv)
    try:
        if not args.check:
            fetch(args.folder, args.url)
        problems = dataset.problems(args.folder)
        if problems:
            more = f" ({len(problems)} files missing or different)" if len(problems) > 3 else ""
            raise dataset.error(f"{args.folder}: {'; '.join(problems[:3])}{more}")
    except MissingDataError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{args.folder}: the {len(dataset.checksums)} files of {dataset.title} match their checksums")
    print(f"use it with: export {dataset.setting}={args.folder.resolve()}")
    return 0
