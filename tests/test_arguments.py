"""One rule for `key=value` and one `--env-arg`, shared by every `scope` command."""

from __future__ import annotations

from pathlib import Path

import pytest

from baselines.arguments import parse_key_value, parse_value
from baselines.cli import main
from baselines.training.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_values_are_json_else_yaml_else_text():
    assert parse_value("1") == 1
    assert parse_value("1e-5") == 1e-5  # YAML alone reads this as a string
    assert parse_value('{"a": [1, 2]}') == {"a": [1, 2]}
    assert parse_value("[scripted, hf:gpt2]") == ["scripted", "hf:gpt2"]
    assert parse_value("wait") == "wait"
    assert parse_value("a: b: c") == "a: b: c"  # not YAML either: the text as given
    assert parse_key_value("lr=0.5") == ("lr", 0.5)
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_key_value("lr")


def test_config_overrides_and_env_args_read_values_alike():
    config = load_config(None, ["env=PersuasionActs", "lr=1e-5", 'env_kwargs={"obs": "dict"}'])
    assert config.lr == 1e-5 and isinstance(config.lr, float)
    assert config.env_kwargs == {"obs": "dict"}


def test_env_arg_is_declared_in_one_place():
    declared = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "baselines").rglob("*.py"))
        if '"--env-arg"' in path.read_text()
    ]
    assert declared == ["baselines/arguments.py"]


@pytest.mark.parametrize(
    "arguments",
    [
        ["play", "P4G", "--env-arg", "persona_source"],
        ["evaluate", "--env", "P4G", "--agents", "scripted", "--simulators", "scripted", "--env-arg", "=1"],
        ["serve", "--env-arg", "max_turns=3"],
    ],
)
def test_a_malformed_env_arg_is_a_usage_error(arguments, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 2
    assert "--env-arg expects" in capsys.readouterr().err
