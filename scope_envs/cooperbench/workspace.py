"""A side's workspace: a private copy of the base tree, its file tools, its commands and its diff.

File tools run in this process, so every path is checked here: relative, no `..`, and its real
path (symlinks followed) inside the workspace; and so are sizes: no file over `MAX_FILE_BYTES` is
read or made, no `write_file` over `MAX_WRITE_BYTES`, and no write beyond the sandbox's disk cap.
Commands run in the workspace's `Sandbox` as a user that owns only this workspace. The diff is
taken with a git directory kept outside the workspace, where the agent's commands cannot reach it.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from scope_envs.cooperbench.patches import filter_test_files
from scope_envs.cooperbench.sandbox import Limits, RunResult, Sandbox
from scope_envs.cooperbench.sources import BaseSource, TestEnvironment, copy_tree, git
from scope_envs.core.tools import ToolError

IGNORED = ("__pycache__/", "*.pyc", ".pytest_cache/", "*.egg-info/", ".mypy_cache/", ".ruff_cache/")
MAX_READ_CHARS = 60_000
MAX_WRITE_BYTES = 2 * 1024**2
MAX_FILE_BYTES = 8 * 1024**2
MAX_LISTED = 400


class Workspace:
    """A copy of `source.tree` under `parent/name`, with its git directory beside it."""

    def __init__(
        self,
        source: BaseSource,
        environment: TestEnvironment,
        parent: Path,
        name: str,
        *,
        limits: Limits | None = None,
        hidden: tuple[Path, ...] = (),
    ) -> None:
        self.root = Path(parent) / name
        self.git_dir = Path(parent) / f".{name}.git"
        copy_tree(source.tree, self.root)
        copy_tree(source.git_dir, self.git_dir)
        os.chmod(self.git_dir, 0o700)
        (self.git_dir / "info").mkdir(exist_ok=True)
        (self.git_dir / "info" / "exclude").write_text("\n".join(IGNORED) + "\n")
        self.environment = environment
        self.sandbox = Sandbox(
            self.root,
            limits=limits or Limits(),
            readable=environment.readable,
            hidden=hidden,
            env={"PYTHONPATH": environment.python_path(self.root)},
            path_prefix=(str(environment.venv / "bin"),),
        )
        self.sandbox.adopt()
        os.chmod(self.root, 0o700)  # the partner's sandbox user cannot enter it

    # ---- paths ----------------------------------------------------------------------------------------

    def resolve(self, path: str, *, must_exist: bool = True) -> Path:
        """The absolute path of a workspace-relative `path`; a `ToolError` for anything leading out."""
        if not isinstance(path, str) or "\x00" in path:
            raise ToolError("the path must be a string without NUL characters")
        pure = PurePosixPath(path.strip() or ".")
        if pure.is_absolute():
            raise ToolError(f"'{path}' is absolute: paths are relative to the repository root")
        if ".." in pure.parts:
            raise ToolError(f"'{path}' contains '..': paths must stay inside the repository")
        candidate = self.root.joinpath(*pure.parts) if pure.parts else self.root
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"'{path}' leads outside the repository (through a symbolic link)")
        if must_exist and not os.path.lexists(candidate):
            raise ToolError(f"'{path}' does not exist")
        return real

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."

    # ---- file tools -----------------------------------------------------------------------------------

    def list_files(self, path: str = ".", max_depth: int = 2) -> str:
        top = self.resolve(path)
        if not top.is_dir():
            raise ToolError(f"'{path}' is not a directory")
        lines: list[str] = []
        for directory, dirnames, filenames in os.walk(top):
            here = Path(directory)
            depth = len(here.relative_to(top).parts)
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".pytest_cache", ".git"))
            if depth >= max_depth:
                dirnames[:] = []
            for name in dirnames:
                lines.append(self.relative(here / name) + "/")
            for name in sorted(filenames):
                if not name.endswith(".pyc"):
                    lines.append(self.relative(here / name))
            if len(lines) > MAX_LISTED:
                break
        lines.sort()
        if len(lines) > MAX_LISTED:
            return "\n".join(lines[:MAX_LISTED]) + f"\n[... listing cut at {MAX_LISTED} entries; list a subfolder]"
        return "\n".join(lines) if lines else "(empty directory)"

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        target = self.resolve(path)
        if target.is_dir():
            raise ToolError(f"'{path}' is a directory; use list_files")
        data = _read_bytes(target)
        if b"\x00" in data[:8192]:
            raise ToolError(f"'{path}' is a binary file")
        lines = data.decode("utf-8", "replace").splitlines()
        first = max(1, start_line or 1)
        last = min(len(lines), end_line if end_line is not None else len(lines))
        if lines and first > len(lines):
            raise ToolError(f"'{path}' has {len(lines)} lines; start_line {first} is past its end")
        numbered = [f"{number:6d}\t{lines[number - 1]}" for number in range(first, last + 1)]
        text = "\n".join(numbered)
        if len(text) > MAX_READ_CHARS:
            text = text[:MAX_READ_CHARS] + "\n[... cut; read a smaller line range]"
        return text if text else "(empty file)"

    def write_file(self, path: str, content: str) -> str:
        encoded = content.encode("utf-8", "surrogatepass")
        if len(encoded) > MAX_WRITE_BYTES:
            raise ToolError(f"content of {len(encoded)} bytes exceeds the {MAX_WRITE_BYTES}-byte limit of write_file")
        target = self.resolve(path, must_exist=False)
        if target.is_dir():
            raise ToolError(f"'{path}' is a directory")
        self._check_room(target, len(encoded))
        created = self._make_parents(target.parent)
        _write_bytes(target, encoded)
        self.sandbox.adopt(target)
        if created is not None:
            self.sandbox.adopt(created)
        return f"wrote {len(content.splitlines())} lines to {self.relative(target)}"

    def replace_in_file(self, path: str, old: str, new: str, replace_all: bool = False) -> str:
        target = self.resolve(path)
        if target.is_dir():
            raise ToolError(f"'{path}' is a directory")
        text = _read_bytes(target).decode("utf-8", "surrogateescape")
        if not old:
            raise ToolError("'old' must not be empty")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"'old' does not occur in {path}; read the file and copy the text exactly")
        if count > 1 and not replace_all:
            raise ToolError(f"'old' occurs {count} times in {path}; give more context or set replace_all")
        replaced = count if replace_all else 1
        size = _encoded_size(text)
        growth = replaced * (_encoded_size(new) - _encoded_size(old))
        if size + growth > MAX_FILE_BYTES:  # checked before the new text is built in this process's memory
            raise ToolError(f"the result would be {size + growth} bytes, over the file limit of {MAX_FILE_BYTES}")
        self._check_room(target, size + growth)
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        _write_bytes(target, updated.encode("utf-8", "surrogateescape"))
        self.sandbox.adopt(target)
        return f"replaced {count if replace_all else 1} occurrence(s) in {self.relative(target)}"

    def _check_room(self, target: Path, size: int) -> None:
        """Refuses a write that would take the workspace over the sandbox's disk cap."""
        current = os.lstat(target).st_size if os.path.lexists(target) else 0
        room = self.sandbox.disk_room()
        if size - current > room:
            raise ToolError(f"the workspace is at its disk-space limit ({max(room, 0)} bytes left); delete files first")

    def run(self, command: str, timeout: float) -> RunResult:
        return self.sandbox.shell(command, limits=self.sandbox.limits.with_wall(timeout))

    def _make_parents(self, directory: Path) -> Path | None:
        """Creates missing parents (inside the workspace); returns the topmost one created."""
        missing = []
        current = directory
        while not current.exists():
            missing.append(current)
            current = current.parent
        if not missing:
            if not current.is_dir():
                raise ToolError(f"'{self.relative(current)}' is a file, not a directory")
            return None
        for folder in reversed(missing):
            folder.mkdir()
        return missing[-1]

    # ---- result ---------------------------------------------------------------------------------------

    def diff(self) -> str:
        """The workspace's changes against the base as a git patch, test files filtered out."""
        run = {"git_dir": self.git_dir, "work_tree": self.root, "cwd": self.root}
        git("add", "--all", ".", **run)
        patch = git("diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "base", **run).stdout
        return filter_test_files(patch)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.git_dir, ignore_errors=True)


def _open_regular(path: Path, flags: int) -> int:
    """Opens a regular, singly linked file without following a final symlink or blocking on a FIFO."""
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise ToolError("not a regular file (or a hard link): the file tools only handle plain files")
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as error:
        raise ToolError(f"cannot open: {error.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise ToolError("not a regular file (or a hard link): the file tools only handle plain files")
    os.set_blocking(fd, True)
    return fd


def _encoded_size(text: str) -> int:
    """The size of `text` as written back (undecodable bytes of the file come back as they were)."""
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "surrogatepass"))


def _read_bytes(path: Path) -> bytes:
    with os.fdopen(_open_regular(path, os.O_RDONLY), "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"the file is over the {MAX_FILE_BYTES}-byte limit of the file tools; use run_command")
    return data


def _write_bytes(path: Path, data: bytes) -> None:
    fd = _open_regular(path, os.O_WRONLY | os.O_CREAT)
    with os.fdopen(fd, "wb") as handle:
        handle.truncate(0)
        handle.write(data)
