"""The structure the import-linter contracts and the design promise: one-way layers, benchmarks
in their own folders, generic layers that name no benchmark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
GENERIC = [ROOT / "scope_envs" / "core", ROOT / "sims", ROOT / "baselines"]
MARKERS = ("DONATE", "###STOP###")  # the benchmarks' own turn markers, which generic code once matched


def benchmark_folders() -> list[str]:
    return sorted(
        path.name
        for path in (ROOT / "scope_envs").iterdir()
        if (path / "__init__.py").is_file() and path.name != "core"
    )


def contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {contract["type"]: contract for contract in config["tool"]["importlinter"]["contracts"]}


def test_every_benchmark_folder_is_under_the_import_contracts():
    folders = benchmark_folders()
    assert len(folders) >= 4
    listed = contracts()
    expected = {f"scope_envs.{name}" for name in folders}
    assert set(listed["forbidden"]["forbidden_modules"]) == expected, "add the new folder to the forbidden contract"
    assert set(listed["independence"]["modules"]) == expected, "add the new folder to the independence contract"
    assert listed["layers"]["layers"] == ["baselines", "sims", "scope_envs"]


def test_generic_layers_name_no_benchmark():
    names = [*benchmark_folders(), "tau2", "persuasion", *MARKERS]
    pattern = re.compile("|".join(re.escape(name) for name in names), re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in GENERIC
        for path in sorted(folder.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)
