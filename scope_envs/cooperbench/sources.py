"""A task's repository at its base commit, and the cached virtual environment its tests run in.

Repository sources, in order: a local checkout given by the user (a git checkout holding the
base commit, exported with `git archive`; or a plain directory taken as it is); a bare clone of
the upstream repository, made once into the cache when online; a PyPI source distribution known
to accept the task's patches (`KNOWN_SDISTS`). Each source becomes a read-only tree in the cache
plus a one-commit git repository of that tree (workspaces diff against it, merges start from it).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scope_envs.cooperbench.dataset import NON_PYTHON, Task, cache_dir

# Source distributions that accept a task family's patches (checked: see docs/envs/cooperbench.md).
KNOWN_SDISTS = {"pallets_jinja_task": ("Jinja2", "3.0.3")}


@dataclass(frozen=True)
class Recipe:
    """How a repository's tests run: pytest in a venv holding `requirements`, the code on `python_path`.

    `plugins`: the pytest plugin modules the tests need; grading loads these by name and no
    others (entry points are ignored, so that a tree cannot bring its own).
    """

    requirements: tuple[str, ...]
    python_path: tuple[str, ...] = ("src", ".")
    install_base: bool = False  # also install the base tree's own dependencies (`pip install <base>`)
    plugins: tuple[str, ...] = ()


RECIPES = {"pallets_jinja_task": Recipe(("pytest==8.3.5", "MarkupSafe==2.1.5"), ("src",))}
DEFAULT_RECIPE = Recipe(("pytest",), ("src", "."), install_base=True)


class SourceUnavailableError(RuntimeError):
    """No source of a task's repository could be found (offline and no local checkout)."""


@dataclass(frozen=True)
class BaseSource:
    """The base tree (read-only), its one-commit git repository and where they came from."""

    tree: Path
    git_dir: Path
    origin: str
    key: str


def git(
    *args: str,
    cwd: Path | None = None,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    check: bool = True,
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """Runs git with no user or system configuration, no hooks, and trusted ownership checks off."""
    command = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "safe.directory=*"]
    command += ["-c", "user.name=scope", "-c", "user.email=scope@localhost", "-c", "commit.gpgsign=false"]
    command += ["-c", "core.autocrlf=false", "-c", "init.defaultBranch=main"]
    if git_dir is not None:
        command += ["--git-dir", str(git_dir)]
    if work_tree is not None:
        command += ["--work-tree", str(work_tree)]
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }
    if cwd is not None:  # never pick up a repository around a cache or scratch directory
        environment["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    return subprocess.run(
        [*command, *args], cwd=cwd, env=environment, capture_output=True, text=True, errors="replace",
        check=check, timeout=timeout,
    )  # fmt: skip


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path.lock`, so that concurrent envs build a cache entry once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def copy_tree(source: Path, target: Path) -> None:
    """Copies a directory tree with its symbolic links as links (`cp -a` where there is one)."""
    if shutil.which("cp") and sys.platform.startswith("linux"):
        subprocess.run(["cp", "-a", "--no-dereference", str(source), str(target)], check=True, capture_output=True)
    else:
        shutil.copytree(source, target, symlinks=True)


def _world_readable(root: Path) -> None:
    """Trees and venvs in the cache are read by sandbox users: directories 755, files 644 (or 755)."""
    for directory, _, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)


def cache_root(cache: Path | None = None) -> Path:
    root = Path(cache) if cache is not None else cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    return root


def resolve_source(
    task: Task, *, checkouts: Mapping[str, str | os.PathLike[str]] | None = None, online: bool = True,
    cache: Path | None = None,
) -> BaseSource:  # fmt: skip
    """The base tree of `task`, built once into the cache; raises `SourceUnavailableError`."""
    root = cache_root(cache)
    tried = []
    checkout = (checkouts or {}).get(task.repo)
    if checkout is not None:
        return _from_checkout(task, Path(checkout), root)
    if task.base_commit and task.url and online:
        try:
            return _from_clone(task, root)
        except (subprocess.SubprocessError, OSError) as error:
            tried.append(f"clone of {task.url}: {str(error).strip()[:200]}")
    elif task.base_commit and task.url:
        clone = root / "git" / f"{task.repo}.git"
        if clone.is_dir() and _has_commit(clone, task.base_commit):
            return _from_clone(task, root)
    if task.repo in KNOWN_SDISTS:
        try:
            return _from_sdist(task, root)
        except (subprocess.SubprocessError, OSError, tarfile.TarError) as error:
            tried.append(f"PyPI source distribution: {str(error).strip()[:200]}")
    raise SourceUnavailableError(
        f"no source for {task.name}: pass checkouts={{'{task.repo}': PATH}} (a checkout of {task.url}"
        f" holding {task.base_commit}) or go online. Tried: " + ("; ".join(tried) or "nothing applicable")
    )


def _has_commit(git_dir: Path, commit: str) -> bool:
    return git("cat-file", "-e", f"{commit}^{{commit}}", git_dir=git_dir, check=False).returncode == 0


def _from_checkout(task: Task, checkout: Path, root: Path) -> BaseSource:
    if not checkout.is_dir():
        raise SourceUnavailableError(f"the checkout {checkout} of {task.repo} is not a directory")
    dot_git = checkout / ".git"
    if dot_git.exists() and task.base_commit and _has_commit(_git_dir_of(checkout), task.base_commit):
        key = f"{task.repo}-{task.base_commit[:12]}"
        return _materialise(root, key, f"checkout {checkout} at {task.base_commit}",
                            lambda target: _archive(_git_dir_of(checkout), task.base_commit or "", target))  # fmt: skip
    digest = hashlib.sha256(str(checkout.resolve()).encode()).hexdigest()[:12]
    return _materialise(root, f"{task.repo}-local-{digest}", f"directory {checkout}",
                        lambda target: shutil.copytree(checkout, target, symlinks=True,
                                                       ignore=shutil.ignore_patterns(".git")))  # fmt: skip


def _git_dir_of(checkout: Path) -> Path:
    return Path(git("rev-parse", "--absolute-git-dir", cwd=checkout).stdout.strip())


def _from_clone(task: Task, root: Path) -> BaseSource:
    assert task.base_commit and task.url
    clone = root / "git" / f"{task.repo}.git"
    with locked(clone):
        if not clone.is_dir():
            git("clone", "--bare", "--quiet", task.url, str(clone), timeout=1800)
        if not _has_commit(clone, task.base_commit):
            git("fetch", "--quiet", "origin", task.base_commit, git_dir=clone, timeout=1800)
    key = f"{task.repo}-{task.base_commit[:12]}"
    return _materialise(root, key, f"{task.url} at {task.base_commit}",
                        lambda target: _archive(clone, task.base_commit or "", target))  # fmt: skip


def _archive(git_dir: Path, commit: str, target: Path) -> None:
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "--format=tar", commit], capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout), mode="r:") as tar:
        tar.extractall(target, filter="data")


def _from_sdist(task: Task, root: Path) -> BaseSource:
    name, version = KNOWN_SDISTS[task.repo]
    key = f"{task.repo}-sdist-{name}-{version}"

    def build(target: Path) -> None:
        downloads = root / "sdists"
        downloads.mkdir(exist_ok=True)
        archives = list(downloads.glob(f"{name}-{version}.tar.gz"))
        if not archives:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                 f"{name}=={version}", "-d", str(downloads)],
                check=True, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            archives = list(downloads.glob(f"{name}-{version}.tar.gz"))
        if not archives:
            raise OSError(f"pip did not leave {name}-{version}.tar.gz in {downloads}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(target.parent / f"{target.name}-x", filter="data")
        (target.parent / f"{target.name}-x" / f"{name}-{version}").rename(target)
        shutil.rmtree(target.parent / f"{target.name}-x")

    return _materialise(root, key, f"PyPI {name}=={version} source distribution", build)


def _materialise(root: Path, key: str, origin: str, build: Callable[[Path], object]) -> BaseSource:
    """Builds `trees/<key>` (read-only) and `trees/<key>.git` (one commit) once, atomically."""
    tree = root / "trees" / key
    git_dir = root / "trees" / f"{key}.git"
    with locked(tree):
        if not (git_dir / "HEAD").is_file() or not tree.is_dir():
            shutil.rmtree(tree, ignore_errors=True)
            shutil.rmtree(git_dir, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root / "trees"))
            staged_tree = staging / "tree"
            build(staged_tree)
            staged_git = staging / "git"
            git("init", "--quiet", "--bare", str(staged_git))
            (staged_git / "info").mkdir(exist_ok=True)
            git("add", "--all", "--force", ".", git_dir=staged_git, work_tree=staged_tree, cwd=staged_tree)
            git("commit", "--quiet", "-m", f"base: {origin}", git_dir=staged_git, work_tree=staged_tree)
            git("tag", "base", git_dir=staged_git)
            git("repack", "-a", "-d", "-q", git_dir=staged_git)  # workspaces copy one pack, not loose objects
            git("pack-refs", "--all", git_dir=staged_git)
            git("prune", git_dir=staged_git)
            _world_readable(staging)
            staged_tree.rename(tree)
            staged_git.rename(git_dir)
            shutil.rmtree(staging, ignore_errors=True)
    return BaseSource(tree, git_dir, origin, key)


def recipe_for(task: Task) -> Recipe:
    if task.repo in NON_PYTHON:
        raise SourceUnavailableError(
            f"{task.name} is tested with a non-Python toolchain; this env runs pytest suites only"
        )
    return RECIPES.get(task.repo, DEFAULT_RECIPE)


@dataclass(frozen=True)
class TestEnvironment:
    """A cached virtual environment and what the sandbox needs to run tests in it."""

    venv: Path
    recipe: Recipe

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def readable(self) -> tuple[Path, ...]:
        """Paths a sandboxed run must see: the venv and the interpreter it was made from."""
        return (self.venv, Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent)

    def python_path(self, root: Path) -> str:
        return os.pathsep.join(str(root / part) for part in self.recipe.python_path)


def test_environment(task: Task, source: BaseSource, *, cache: Path | None = None) -> TestEnvironment:
    """The task family's venv (pytest and the recipe's requirements), created once with pip."""
    recipe = recipe_for(task)
    fingerprint = "\n".join([sys.version, *recipe.requirements, source.key if recipe.install_base else ""])
    digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:12]
    venv = cache_root(cache) / "venvs" / f"{task.repo}-{digest}"
    with locked(venv):
        if not (venv / ".complete").is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            subprocess.run([*pip, *recipe.requirements], check=True, capture_output=True, text=True, timeout=1800)
            if recipe.install_base:
                subprocess.run([*pip, str(source.tree)], check=True, capture_output=True, text=True, timeout=1800)
            _world_readable(venv)
            (venv / ".complete").write_text("ok\n")
    return TestEnvironment(venv, recipe)
