"""What made a study's run, and running the project's code as a recorded commit had it.

`provenance()` is what a run records: the commit, whether the tree held uncommitted changes, the
interpreter, the library versions, the kernels (`baselines.training.portable.kernels_in_use`) and which
data settings were set.
`provenance_differences` names what differs between a record and its rerun. `run_at_commit` runs a
program with the code of one commit only, in a temporary git worktree and a child process with the
portable kernels, and returns what the program replied and the environment it computed in: the one
way a study's `verify` reruns a record, whatever the study.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from baselines.training.portable import kernels_in_use, portable_environment

ROOT = Path(__file__).resolve().parents[2]
# The project's top-level packages: a rerun at a commit takes them from that commit's tree only.
PROJECT_PACKAGES = ("scope_envs", "sims", "baselines", "scope_verifiers")
LIBRARIES = ("numpy", "torch", "scipy", "gymnasium", "pettingzoo")

# What beside the code and the library versions can change a run's numbers, as `verify` names it.
PLATFORM_LABELS = {
    "machine": "machine",
    "numpy": "numpy",
    "numpy_baseline": "numpy baseline instructions",
    "numpy_dispatch": "numpy dispatched instructions",
    "mkl_cbwr": "MKL_CBWR",
    "torch": "torch",
    "torch_cpu_capability": "torch CPU capability",
    "torch_threads": "torch intra-op threads",
}


def project_paths(root: Path = ROOT) -> list[str]:
    """Where the project's packages live in a checkout: a folder each, or a module file at the root."""
    return [name if (root / name).is_dir() else f"{name}.py" for name in PROJECT_PACKAGES]


def provenance(root: Path = ROOT) -> dict[str, Any]:
    """What a run was made from: the commit, whether the project's packages held uncommitted changes,
    and `environment`."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    # an untracked module counts: the commit a run records would lack it
    # a package folder and a root module of each name: deleting either is a change too
    paths = [path for name in PROJECT_PACKAGES for path in (name, f"{name}.py")]
    changes = git("status", "--porcelain", "--untracked-files=normal", "--", *paths)
    return {"commit": git("rev-parse", "HEAD") or None, "clean": changes == "", **environment(LIBRARIES)}


def recorded_commit(recorded: dict[str, Any], name: str) -> str:
    """The commit a record can be rerun at: refused where it names none, or its tree held uncommitted
    changes (no commit holds the code that made it)."""
    if recorded.get("commit") is None or recorded.get("clean") is not True:
        raise SystemExit(
            f"{name} names no commit it was made from as it stands (commit {recorded.get('commit')}, clean "
            f"{recorded.get('clean')}): it cannot be rerun at a commit; rerun it with this checkout's code (--here)"
        )
    return recorded["commit"]


def refuse_mixed_commits(made: dict[str, Any], recorded: Iterable[tuple[Path, dict[str, Any]]], remedy: str) -> None:
    """A study's runs come from one commit, committed: refuses a tree with uncommitted changes and any
    recorded run (its path, its provenance) made at another commit than `made`'s, or from a tree with
    uncommitted changes."""
    if not made["clean"] or made["commit"] is None:
        raise SystemExit(
            f"a study runs from a committed tree: commit (or stash) the changes to {', '.join(project_paths())} "
            "first, new files included, so every run names the code it came from"
        )
    for path, record in recorded:
        if record.get("commit") != made["commit"] or record.get("clean") is not True:
            state = "" if record.get("clean") is True else " from a tree with uncommitted changes"
            raise SystemExit(
                f"{path} was made at commit {record.get('commit')}{state}, this is {made['commit']}: a study's "
                f"runs come from one commit; {remedy}"
            )


# `environment` and the functions it calls also run in the rerun child, which must not import this
# checkout's code: their source travels with it (`_program`), so they import nothing of the project.


def environment(libraries: tuple[str, ...]) -> dict[str, Any]:
    """The interpreter, the versions of `libraries` and the kernels in use (`kernels_in_use`)."""
    import sys

    return {
        "python": sys.version.split()[0],
        "versions": library_versions(libraries),
        "platform": kernels_in_use(),
        "data": data_settings(),
    }


def data_settings() -> dict[str, str]:
    """Which settings that point a benchmark at its data (`SCOPE_<BENCHMARK>_DATA`) were set: with one,
    an env may read a corpus instead of its embedded material. Whether, not where: a path is the machine's."""
    import os

    return {name: "set" for name in sorted(os.environ) if name.startswith("SCOPE_") and name.endswith("_DATA")}


def library_versions(libraries: tuple[str, ...]) -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in libraries:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def provenance_entries(made: dict[str, Any], data_names: Iterable[str] = ()) -> dict[str, Any]:
    """The entries of a provenance that can change a result, by the name `verify` reports them under;
    each data setting of `data_names` as set or unset where the provenance records its data settings."""
    entries = {label: made[key] for key, label in (("commit", "commit"), ("python", "Python")) if key in made}
    entries.update(made.get("versions", {}))
    entries.update({PLATFORM_LABELS.get(key, key): value for key, value in made.get("platform", {}).items()})
    if "data" in made:
        entries.update({f"${name}": made["data"].get(name, "unset") for name in sorted({*made["data"], *data_names})})
    return entries


def provenance_differences(recorded: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """Each entry that differs between a recorded run's provenance and its rerun's, named; an entry
    the record lacks (older records have no platform) is "not recorded"."""
    data_names = {*recorded.get("data", {}), *here.get("data", {})}
    before, now = provenance_entries(recorded, data_names), provenance_entries(here, data_names)
    differences = []
    for name in dict.fromkeys([*before, *now]):
        if name not in before:
            differences.append(f"{name} not recorded ({_shown(now[name])} here)")
        elif name not in now:
            differences.append(f"{name} {_shown(before[name])} (recorded), not reported here")
        elif before[name] != now[name]:
            differences.append(f"{name} {_shown(before[name])} (recorded) vs {_shown(now[name])} (here)")
    return differences


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


# The frame of every rerun. Before the program imports anything of the project, a finder first on
# sys.meta_path takes the project's packages from the tree or fails: an editable install's finder (and a
# path .pth, or a wheel) would otherwise supply whatever the commit lacks from the installed checkout,
# mixing its code with the commit's. After the program, the child refuses to reply if any project module
# came from outside the tree. The program reads `request` and sets `reply`.
_BEFORE = """
import importlib.machinery
import json
import os
import sys

request = json.loads(sys.stdin.read())
tree, packages = os.path.realpath(request["tree"]), set(request["packages"])


class RecordedCommitFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] not in packages:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path if "." in name else [tree])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} at the recorded commit", name=name)
        return spec


sys.meta_path.insert(0, RecordedCommitFinder)
"""

_AFTER = """
elsewhere = []
for name, module in list(sys.modules.items()):
    if name.partition(".")[0] in packages:
        file = getattr(module, "__file__", None)
        places = [file] if file else list(getattr(module, "__path__", []))
        elsewhere += [f"{name} from {place}" for place in places
                      if not os.path.realpath(place).startswith(tree + os.sep)]
if elsewhere:
    sys.exit("the rerun imported code from outside the recorded commit: " + ", ".join(elsewhere))
print(json.dumps({"reply": reply, "provenance": environment(tuple(request["libraries"]))}))
"""


def _program(body: str) -> str:
    shipped = (environment, library_versions, data_settings, kernels_in_use)
    return "\n\n".join(["from __future__ import annotations", *map(inspect.getsource, shipped), _BEFORE, body, _AFTER])


def run_at_commit(
    commit: str | None, body: str, request: dict[str, Any], *, here: bool = False
) -> tuple[Any, dict[str, Any]]:
    """Runs `body` (Python that reads `request` and sets a JSON-able `reply`) with the code of `commit`
    only (`here`: this checkout's instead), in portable kernels: its reply and the environment it
    computed in."""
    if commit is None and not here:
        raise ValueError("no commit to rerun at: name one, or rerun with this checkout's code (here=True)")
    with tempfile.TemporaryDirectory() as scratch:
        tree = ROOT
        if not here:
            tree = Path(scratch) / "tree"
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), commit], cwd=ROOT, check=True)
        try:
            request = {**request, "tree": str(tree), "packages": PROJECT_PACKAGES, "libraries": LIBRARIES}
            done = subprocess.run(
                [sys.executable, "-c", _program(body)],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                cwd=tree,
                env=portable_environment(),  # as the recorded runs computed (baselines.training.portable)
                check=False,
            )
        finally:
            if not here:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the rerun at {'this checkout' if here else commit} failed:\n{done.stderr[-3000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["reply"], answer["provenance"]
