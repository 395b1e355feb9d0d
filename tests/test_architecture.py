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


BENCHMARK_FREE, TRAINING_CORE = "The generic layers name no benchmark", "The training core imports no application"


def contracts() -> dict[str, dict]:
    """The import-linter contracts by name."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {contract["name"]: contract for contract in config["tool"]["importlinter"]["contracts"]}


def of_type(kind: str) -> list[dict]:
    return [contract for contract in contracts().values() if contract["type"] == kind]


def test_every_benchmark_folder_is_under_the_import_contracts():
    folders = benchmark_folders()
    assert len(folders) >= 4
    listed = contracts()
    expected = {f"scope_envs.{name}" for name in folders}
    assert set(listed[BENCHMARK_FREE]["forbidden_modules"]) == expected, "add the new folder to the forbidden contract"
    [independence] = of_type("independence")
    assert set(independence["modules"]) == expected, "add the new folder to the independence contract"
    [layers] = of_type("layers")
    assert layers["layers"] == ["baselines", "sims", "scope_envs"]


def test_the_training_core_is_under_a_contract_against_every_application():
    """Every folder of baselines/ is either the training core or an application, and the contract
    forbids the core every application (so a new application folder cannot slip past it)."""
    contract = contracts()[TRAINING_CORE]
    core = set(contract["source_modules"])
    assert core == {"baselines.training", "baselines.distributed"}
    packages = {f"baselines.{path.name}" for path in (ROOT / "baselines").iterdir() if (path / "__init__.py").is_file()}
    modules = {f"baselines.{path.stem}" for path in (ROOT / "baselines").glob("*.py") if path.stem != "__init__"}
    applications = (packages | modules) - core - {"baselines.arguments"}  # the commands' shared arguments
    assert set(contract["forbidden_modules"]) == applications


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
