"""An ordinary mistake on the `scope` command line: one clear line on stderr and a non-zero exit
status, no traceback; `--debug` or $SCOPE_DEBUG=1 shows the traceback. Each case runs the real
command in a subprocess, and none loads a model."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from baselines import cli

UNSET = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "SCOPE_DEBUG")
SYNTHETIC = ("--env-arg", "persona_source=synthetic")  # P4G without a corpus, and without the note saying so


def scope(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key not in UNSET}
    environment.update(env, XDG_CACHE_HOME=str(cwd / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "baselines.cli", *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a mistake prints, after checking that it is one line and the exit status is not 0."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def bad_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text("a: [\n")
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("play", "P4G", *SYNTHETIC, "--simulator", "bogus:xyz"),
        ("play", "P4G", *SYNTHETIC, "--human", "agent", "--opponent", "bogus:xyz"),
        ("diagnose", "--env", "P4G", *SYNTHETIC, "--simulator", "bogus:xyz"),
        ("evaluate", "--env", "P4G", *SYNTHETIC, "--agents", "scripted", "--simulators", "bogus:xyz"),
        ("evaluate", "--env", "P4G", *SYNTHETIC, "--agents", "bogus:xyz", "--simulators", "scripted"),
    ],
    ids=["play", "play-human", "diagnose", "evaluate-simulator", "evaluate-agent"],
)
def test_an_unknown_spec_lists_the_backends_of_that_env(args: tuple[str, ...], tmp_path: Path) -> None:
    line = error_line(scope(*args, "--out" if args[0] == "evaluate" else "--seed", "0", cwd=tmp_path))
    # not "a linear act policy", and not the backends of another benchmark (family, mixture)
    assert "unknown policy spec 'bogus:xyz'; known backends:" in line and "linear act policy" not in line
    known = line.split("known backends:")[1]
    assert "openai" in known and "scripted" in known and "family" not in known and "mixture" not in known


def test_an_act_level_env_lists_its_own_backends(tmp_path: Path) -> None:
    args = ("evaluate", "--env", "PersuasionActs-v1", "--agents", "scripted", "--simulators", "bogus:xyz")
    line = error_line(scope(*args, "--out", "out", cwd=tmp_path))
    assert "unknown policy spec 'bogus:xyz'" in line and "family" in line and "mixture" in line


def test_opponent_without_human_is_not_silently_ignored(tmp_path: Path) -> None:
    line = error_line(scope("play", "P4G", *SYNTHETIC, "--opponent", "bogus:xyz", cwd=tmp_path))
    assert "--opponent" in line and "--human" in line and "--simulator" in line


@pytest.mark.parametrize(
    "spec, variable", [("openai:gpt-5-mini", "OPENAI_API_KEY"), ("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY")]
)
def test_a_missing_api_key_names_its_variable(spec: str, variable: str, tmp_path: Path) -> None:
    assert variable in error_line(scope("play", "P4G", *SYNTHETIC, "--simulator", spec, cwd=tmp_path))
    human = scope("play", "P4G", *SYNTHETIC, "--human", "agent", "--opponent", spec, cwd=tmp_path)
    assert variable in error_line(human)


@pytest.mark.parametrize("path", ["/nonexistent/ckpt", "./no-such-checkpoint", "~/no-such-checkpoint"])
def test_a_missing_local_model_is_a_missing_directory(path: str, tmp_path: Path) -> None:
    line = error_line(scope("play", "P4G", *SYNTHETIC, "--simulator", f"hf:{path}", cwd=tmp_path))
    assert "no such model directory" in line and path in line and "Repo id" not in line


def test_a_missing_cooperbench_dataset_is_one_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-dataset")
    line = error_line(scope("play", "CooperBench", "--env-arg", f"data_dir={missing}", cwd=tmp_path))
    assert "CooperBench" in line and missing in line


@pytest.mark.parametrize("command", ["train", "eval", "plan"])
def test_a_missing_config_names_its_path(command: str, tmp_path: Path) -> None:
    assert "nonexistent.yaml" in error_line(scope(command, "nonexistent.yaml", cwd=tmp_path))
    missing = str(tmp_path / "no-folder" / "config.yaml")
    assert missing in error_line(scope(command, missing, cwd=tmp_path))


@pytest.mark.parametrize("command", ["train", "eval", "plan"])
def test_malformed_yaml_names_the_file_line_and_column(command: str, bad_yaml: Path, tmp_path: Path) -> None:
    line = error_line(scope(command, str(bad_yaml), cwd=tmp_path))
    assert str(bad_yaml) in line and "line 2, column 1" in line


def test_an_invalid_config_value_is_one_line(tmp_path: Path) -> None:
    line = error_line(scope("train", "p4g_tiny", "steps=many", cwd=tmp_path))
    assert "steps" in line


@pytest.mark.parametrize(
    "args, words",
    [
        (("demo", "--methods", "bogus"), "unknown methods"),
        (("demo", "--study", "no-such-study"), "no-such-study"),
        (("fidelity", "--env", "Nope", "scripted"), "unknown environment 'Nope'"),
        (("view", "no-such-run"), "no-such-run"),
        (("export", "no-such-run", "out.jsonl"), "no-such-run"),
        (("study", "export", "no-such.sqlite"), "no-such.sqlite"),
        (("serve", "--study", "no-such-study.yaml"), "no-such-study.yaml"),
        (("play", "Nope"), "unknown environment 'Nope'"),
        (("play", "P4G", *SYNTHETIC, "--episodes", "0"), "--episodes must be at least 1"),
        (("play", "P4G", *SYNTHETIC, "--simulator", "vs1:scripted"), "k >= 2"),
        (("serve", "--env", "PersuasionActs", "--opponent", "bogus:xyz"), "unknown policy spec 'bogus:xyz'"),
        (("plan", "p4g_qwen3_4b", "--gpu-memory", "0"), "--gpu-memory"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(value[:2]),
)
def test_every_command_says_a_mistake_in_one_line(args: tuple[str, ...], words: str, tmp_path: Path) -> None:
    assert words in error_line(scope(*args, cwd=tmp_path))


def test_an_unknown_env_argument_lists_the_env_s_arguments(tmp_path: Path) -> None:
    line = error_line(scope("play", "P4G", "--env-arg", "bogus=1", cwd=tmp_path))
    assert "P4G takes no argument bogus" in line and "persona_source" in line


def test_a_study_export_of_a_file_that_is_no_database(bad_yaml: Path, tmp_path: Path) -> None:
    assert f"{bad_yaml} is not a study database" in error_line(scope("study", "export", str(bad_yaml), cwd=tmp_path))


def test_demo_names_a_malformed_study_file(bad_yaml: Path, tmp_path: Path) -> None:
    line = error_line(scope("demo", "--study", str(bad_yaml), cwd=tmp_path))
    assert str(bad_yaml) in line and "line 2, column 1" in line


@pytest.mark.parametrize(
    "args, env",
    [(("--debug", "play", "P4G"), {}), (("play", "P4G", "--debug"), {}), (("play", "P4G"), {"SCOPE_DEBUG": "1"})],
    ids=["--debug", "--debug-after-the-command", "SCOPE_DEBUG"],
)
def test_debug_shows_the_traceback(args: tuple[str, ...], env: dict[str, str], tmp_path: Path) -> None:
    result = scope(*args, *SYNTHETIC, "--simulator", "bogus:xyz", cwd=tmp_path, **env)
    assert result.returncode != 0 and "Traceback" in result.stderr and "unknown policy spec" in result.stderr


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(args: object) -> int:
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "_run", broken)
    with pytest.raises(KeyError):
        cli.main(["envs"])


def test_plan_says_when_no_gpu_was_found(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("env: P4G\npolicy: hf:Qwen/Qwen3-4B-Instruct-2507\nlora: {r: 16}\ndtype: bfloat16\n")
    assumed = scope("plan", str(config), cwd=tmp_path, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")
    assert assumed.returncode in (0, 1) and "Traceback" not in assumed.stderr  # 1: does not fit
    device = next(line for line in assumed.stdout.splitlines() if line.startswith("device"))
    assert "no GPU found" in device and "assumed" in device and "80 GB" in device and "--gpu-memory" in device
    given = scope("plan", str(config), "--gpu-memory", "24", cwd=tmp_path, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")
    device = next(line for line in given.stdout.splitlines() if line.startswith("device"))
    assert "24 GB" in device and "assumed" not in device


def test_plan_sizes_for_the_gpu_of_this_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from baselines.apps import plan

    path = tmp_path / "config.yaml"
    path.write_text("env: P4G\npolicy: tiny\n")
    monkeypatch.setattr(plan, "local_gpu", lambda: ("NVIDIA H200", 150.0))
    args = argparse.Namespace(config=str(path), overrides=[], gpu_memory=None)
    config, device = plan._sized(plan.load_config(str(path)), args)
    assert config.gpu_memory_gb == 150.0 and device == "this machine's NVIDIA H200"
    args.overrides = ["gpu_memory_gb=24"]
    config, device = plan._sized(plan.load_config(str(path), args.overrides), args)
    assert config.gpu_memory_gb == 24 and device == ""  # the config's own size
