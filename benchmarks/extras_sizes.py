"""What each extra installs: packages and their installed size, measured with pip's resolver.

For each extra, `pip install --dry-run --ignore-installed --report` resolves `.[EXTRA]` as a
fresh environment would (`--pip`: the pip of a virtual environment with setuptools>=77 and
wheel); each package's size is its installed size in the environment given by `--sizes-from`
(a venv holding them all, e.g. one with `.[dev,tau2]` and the CPU torch). Usage:

    python benchmarks/extras_sizes.py --pip VENV/bin/pip --sizes-from FULL_VENV/bin/python [EXTRA ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
SIZES = """
import importlib.metadata as m, json, sys
out = {}
for d in m.distributions():
    total = 0
    for f in d.files or []:
        try:
            total += f.locate().stat().st_size
        except OSError:
            pass
    out[d.metadata["Name"].lower().replace("_", "-")] = total
json.dump(out, sys.stdout)
"""


def resolved(pip: str, requirement: str) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [pip, "install", "-q", "--dry-run", "--ignore-installed", "--no-build-isolation"]
        command += ["--report", str(report), requirement]
        subprocess.run(command, check=True, capture_output=True, text=True)
        items = json.loads(report.read_text())["install"]
    return sorted(item["metadata"]["name"].lower().replace("_", "-") for item in items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pip", required=True, help="pip of a venv where the project is installed")
    parser.add_argument("--sizes-from", required=True, help="python of a venv holding every package")
    parser.add_argument("extras", nargs="*", help="extras to measure (default: all but vllm and rllib)")
    args = parser.parse_args()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = args.extras or [e for e in project["optional-dependencies"] if e not in {"vllm", "rllib"}]
    sizes = json.loads(subprocess.run([args.sizes_from, "-c", SIZES], capture_output=True, text=True).stdout)
    base = set(resolved(args.pip, str(ROOT)))
    print("| install | packages | installed size | beyond the base install |")
    print("|---|---|---|---|")
    for extra in ["", *extras]:
        names = set(resolved(args.pip, f"{ROOT}[{extra}]" if extra else str(ROOT)))
        names.discard(project["name"])
        known = [sizes[n] for n in names if n in sizes]
        missing = sorted(n for n in names if n not in sizes)
        mb = sum(known) / 1e6
        heavy = sorted(names - base, key=lambda n: -sizes.get(n, 0))[:5]
        label = f"`[{extra}]`" if extra else "base"
        note = f" ({len(missing)} not measured: {', '.join(missing)})" if missing else ""
        print(f"| {label} | {len(names)} | {mb:,.0f} MB{note} | {', '.join(heavy) or '-'} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
