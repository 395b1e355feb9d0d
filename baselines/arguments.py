"""What several `scope` commands share: the one rule for `key=value`, `--env-arg`, and how a
command that stops on an error says why (`failed`: one line, or the traceback under `--debug`).

A value is read as JSON when it is JSON, else as YAML, else kept as the text: `exchanges=1` is a
number, `simulators=[scripted, hf:gpt2]` a list, `lr=1e-5` a float, `termination=wait` a string.
Config overrides (`scope train CONFIG key=value`), `--env-arg` and `--sim-arg` all read it so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import yaml

DEBUG_VARIABLE = "SCOPE_DEBUG"


def debugging(args: argparse.Namespace) -> bool:
    """`scope --debug` or `$SCOPE_DEBUG=1`: an error ends the command with its traceback."""
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_VARIABLE, "").strip() not in ("", "0")


def failed(args: argparse.Namespace, error: Exception, status: int = 2) -> int:
    """Says on stderr, in one line, why the command stopped, and returns its exit status; under
    `debugging`, raises `error` again, traceback and all."""
    if debugging(args):
        raise error
    print(f"scope {args.command}: {one_line(error)}", file=sys.stderr)
    return status


def one_line(error: Exception) -> str:
    """The message of `error` on one line; a YAML syntax error's as `FILE: not valid YAML at line
    L, column C: PROBLEM` (yaml's own spans several lines)."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        source = "" if mark.name.startswith("<") else f"{mark.name}: "  # "<unicode string>": read from text
        text = f"{source}not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    elif isinstance(error, FileNotFoundError) and error.filename and error.strerror:
        text = f"{error.strerror}: {error.filename}"  # not "[Errno 2] ..."
    else:
        text = str(error)
    return " ".join(text.split())


def parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def parse_key_value(item: str, what: str = "a setting") -> tuple[str, Any]:
    """`key=value` as (key, value); a ValueError naming `what` for anything else."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{what} expects KEY=VALUE, got {item!r}")
    return key.strip(), parse_value(raw)


def _env_arg(item: str) -> tuple[str, Any]:
    try:
        return parse_key_value(item, "--env-arg")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _per_env_arg(item: str) -> tuple[str, str, Any]:
    env, sep, rest = item.partition(":")
    if not sep or not env:
        raise argparse.ArgumentTypeError(f"--env-arg expects ENV:KEY=VALUE, got {item!r}")
    return (env, *_env_arg(rest))


def add_env_arg(parser: argparse.ArgumentParser, *, per_env: bool = False) -> None:
    """`--env-arg KEY=VALUE` (repeatable): a constructor argument of the env; `per_env`, for a
    command that offers several envs, `--env-arg ENV:KEY=VALUE`. Read by `env_kwargs_of` and
    `per_env_kwargs_of`."""
    parser.add_argument(
        "--env-arg",
        action="append",
        default=[],
        type=_per_env_arg if per_env else _env_arg,
        metavar="ENV:KEY=VALUE" if per_env else "KEY=VALUE",
        help=(
            "a constructor argument of one env, e.g. MyEnv:max_turns=10; repeatable"
            if per_env
            else "a constructor argument of the env, e.g. termination=wait; repeatable"
        )
        + " (values read as JSON, else YAML, else text)",
    )


def add_key_values(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A repeatable `FLAG KEY=VALUE` option read by the same rule (`--sim-arg`)."""

    def parse(item: str) -> tuple[str, Any]:
        try:
            return parse_key_value(item, flag)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parser.add_argument(flag, action="append", default=[], type=parse, metavar="KEY=VALUE", help=help)


def env_kwargs_of(args: argparse.Namespace) -> dict[str, Any]:
    """The env's constructor arguments given with `--env-arg KEY=VALUE`."""
    return dict(args.env_arg)


def per_env_kwargs_of(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each env's constructor arguments given with `--env-arg ENV:KEY=VALUE`."""
    kwargs: dict[str, dict[str, Any]] = {}
    for env, key, value in args.env_arg:
        kwargs.setdefault(env, {})[key] = value
    return kwargs
