"""The GPU acceptance script runs on the CPU too, with a smaller model, so it never rots (the
memory comparison is GPU-only). The whole matrix is slow on a CPU:
`pytest -m slow tests/test_gpu_acceptance.py`."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_acceptance.py"


def _acceptance():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_population_co_training_passes_the_acceptance_checks_on_cpu(tmp_path, capsys):
    acceptance = _acceptance()
    args = ["--device", "cpu", "--envs", "P4G", "--methods", "population", "--steps", "1", "--output", str(tmp_path)]
    assert acceptance.main(args) == 0
    out = capsys.readouterr().out
    assert "1 of 1 runs passed" in out and "FAIL" not in out
    records = [line for line in out.splitlines() if line.startswith("P4G ")]
    assert len(records) == 1 and "population" in records[0]
    assert (tmp_path / "P4G_population" / "metrics.jsonl").is_file()


def test_an_injected_temperature_mismatch_fails_the_check_on_cpu(tmp_path, capsys):
    """Tokens sampled at T = 0.7 and scored at T = 0.5: the mean ratio stays near 1 (it cannot see
    this), mean |log r| and the step-0 share of tokens outside the clip range do."""
    acceptance = _acceptance()
    args = ["--device", "cpu", "--envs", "P4G", "--methods", "single", "--steps", "1", "--output", str(tmp_path)]
    assert acceptance.main([*args, "--train-temperature", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "0 of 1 runs passed" in out
    assert "behaviour_log_ratio_abs" in out and "behaviour_clip_fraction" in out


def test_a_failed_check_is_reported_and_fails_the_run():
    acceptance = _acceptance()
    config = acceptance.load_config(None, ["env=P4G", "steps=2", "method=cotrain", "dtype=bfloat16"])
    records = [
        {
            "step": 1,
            "reward_mean": 0.5,
            "loss": 0.1,
            "ratio_mean": 1.0,
            "behaviour_log_ratio_abs": 0.2,
            "behaviour_clip_fraction": 0.26,
            "simulator/loss": 0.0,
        },
        {"step": 2, "reward_mean": math.nan, "loss": 0.1, "simulator/loss": 0.0},
    ]
    failures = acceptance.check_records(records, config)
    assert any("behaviour_log_ratio_abs (mean |log r|) 0.2 >" in failure for failure in failures)
    assert any("behaviour_clip_fraction (tokens with r outside the clip range) 0.26 >" in f for f in failures)
    assert any("reward_mean is nan" in failure for failure in failures)
    assert any("simulator/behaviour_log_ratio_abs" in failure for failure in failures)  # absent: not checked
    assert acceptance.check_records(records[:1], config)[0].startswith("1 metrics records for 2 steps")


@pytest.mark.slow
def test_every_method_on_both_benchmarks_passes_on_cpu(tmp_path, capsys):
    pytest.importorskip("tau2")
    assert _acceptance().main(["--device", "cpu", "--steps", "2", "--output", str(tmp_path)]) == 0
    assert "8 of 8 runs passed" in capsys.readouterr().out
