"""Recorded numbers do not depend on the CPU: `scope demo` gives the same bits whichever kernels the
machine would pick (torch's AVX-512 / AVX2 / default, numpy's dispatched loops), because its runs
compute in processes with portable kernels (`baselines.training.portable`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from baselines.training.portable import FIXED, NUMPY_SETTING, is_portable, numpy_dispatch_targets, portable_pool

ROOT = Path(__file__).resolve().parents[1]
CELL = ["--methods", "single", "--seeds", "1", "--steps", "120", "--eval-tasks", "50", "--jobs", "1"]


def run_cell(out: Path, environment: dict[str, str]) -> tuple[str, dict]:
    subprocess.run(
        [sys.executable, "-m", "baselines.cli", "demo", *CELL, "--out", str(out)],
        check=True,
        cwd=ROOT,
        env=environment,
        capture_output=True,
    )
    return (out / "summary.json").read_text(), json.loads((out / "kernels.json").read_text())


def test_a_demo_cell_gives_the_same_bits_under_native_and_default_kernels(tmp_path):
    pytest.importorskip("torch")
    native = {key: value for key, value in os.environ.items() if key not in (*FIXED, NUMPY_SETTING)}
    default = {**native, "ATEN_CPU_CAPABILITY": "default", NUMPY_SETTING: " ".join(numpy_dispatch_targets())}
    summary_native, kernels_native = run_cell(tmp_path / "native", native)
    summary_default, kernels_default = run_cell(tmp_path / "default", default)
    assert summary_native == summary_default
    assert kernels_native == kernels_default
    assert is_portable(kernels_native) and kernels_native["torch_cpu_capability"] == "DEFAULT"


def _kernels_of_a_worker():
    import torch  # noqa: F401  (as a training worker does)

    from baselines.training.portable import kernels_in_use

    return kernels_in_use()


def test_a_portable_pool_leaves_the_parents_environment_as_it_was(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    with portable_pool(1) as pool:
        kernels = pool.submit(_kernels_of_a_worker).result()
    assert kernels["torch_cpu_capability"] == "DEFAULT" and kernels["mkl_cbwr"] == "COMPATIBLE"
    assert not kernels["numpy_dispatch"]
    assert os.environ["ATEN_CPU_CAPABILITY"] == "avx2" and "MKL_CBWR" not in os.environ


def test_is_portable_names_what_is_not():
    portable = {"numpy_dispatch": [], "mkl_cbwr": "COMPATIBLE", "torch_cpu_capability": "DEFAULT", "torch_threads": 1}
    assert is_portable(portable)
    assert not is_portable({**portable, "torch_cpu_capability": "AVX512"})
    assert not is_portable({**portable, "numpy_dispatch": ["X86_V3"]})
    assert not is_portable({**portable, "torch_threads": 2})
