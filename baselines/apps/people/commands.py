"""The `scope` subcommands for people: `play --human`, `serve`, `view`, `study export`, `export`."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from baselines.arguments import add_env_arg, env_kwargs_of, failed, per_env_kwargs_of

COMMANDS = ("serve", "view", "study", "export")
TOKEN_VARIABLE = "SCOPE_SERVE_TOKEN"


def add_play_arguments(play: argparse.ArgumentParser) -> None:
    play.add_argument(
        "--human",
        choices=["agent", "user"],
        default=None,
        help="play this side yourself in the terminal (the other side is --opponent)",
    )
    play.add_argument(
        "--opponent",
        default="scripted",
        help="with --human: spec of the other side (scripted, openai:MODEL, hf:CHECKPOINT, ...)",
    )
    play.add_argument("--save", default="play_episodes.jsonl", help="with --human: JSONL file the episode is added to")


def _server_arguments(parser: argparse.ArgumentParser, port: int) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=_port, default=port)
    parser.add_argument("--public", action="store_true", help="allow a non-loopback --host (needs a token)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"access token every visitor must present (or ${TOKEN_VARIABLE}); required with --public",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name people reach the server by (besides loopback and --host); repeatable",
    )


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, got {port}")
    return port


def add_commands(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="the web app: play in a browser, run a human study")
    _server_arguments(serve, 8000)
    serve.add_argument(
        "--opponent",
        action="append",
        default=None,
        help="an opponent players may choose, SPEC or LABEL=SPEC (players see the label); repeatable "
        "(default: scripted)",
    )
    serve.add_argument(
        "--env",
        action="append",
        default=None,
        help="an env offered to players; repeatable (default: every env whose tools run no code; "
        "an env that runs code is offered only when named here, never with --public)",
    )
    add_env_arg(serve, per_env=True)
    serve.add_argument("--study", default=None, help="a study file (YAML): serve it at /study")
    serve.add_argument("--study-db", default=None, help="the study's SQLite file (default: STUDY.sqlite)")
    serve.add_argument("--save", default="play_episodes.jsonl", help="JSONL file finished games are added to")
    serve.add_argument("--run", default=None, help="also browse this training run's episodes at /view")

    view = commands.add_parser("view", help="browse the episodes a training run saved (web app)")
    view.add_argument("run_dir", help="a run folder (with episodes.jsonl) or an episodes JSONL file")
    _server_arguments(view, 8001)

    study = commands.add_parser("study", help="human studies")
    study_commands = study.add_subparsers(dest="study_command", required=True)
    export = study_commands.add_parser("export", help="the results table of a study, and per-condition outcomes")
    export.add_argument("db", help="the study's SQLite file")
    export.add_argument("--out", default="study_results.csv", help="CSV of episodes (a .summary.csv goes beside it)")

    dataset = commands.add_parser("export", help="export saved episodes as JSONL or a Hugging Face dataset")
    dataset.add_argument("source", help="a run folder or an episodes JSONL file")
    dataset.add_argument("out", help="output path (a JSONL file, or a dataset folder for --format hf)")
    dataset.add_argument("--format", choices=["jsonl", "hf"], default="hf")


def wants(args: argparse.Namespace) -> bool:
    return args.command in COMMANDS or (args.command == "play" and getattr(args, "human", None) is not None)


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "play":
            return _play(args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "view":
            return _view(args)
        if args.command == "study":
            return _study_export(args)
        return _export(args)
    except ValueError as error:
        return failed(args, error)


def _play(args: argparse.Namespace) -> int:
    from baselines.apps.people.game import GameSettings
    from baselines.apps.people.terminal import play_in_terminal

    settings = GameSettings(
        args.env,
        args.human,
        args.opponent,
        args.seed,
        args.task_id,
        args.split,
        env_kwargs_of(args),
    )
    return play_in_terminal(settings, args.save)


MIN_TOKEN, MAX_TOKEN = 16, 200


def check_bind(host: str, public: bool, token: str | None) -> None:
    """Loopback is always allowed; any other address needs `--public` and a token of 16 to 200
    characters (letters, digits, `-`, `_`, `.`, `~`: it travels in links)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not (public and token):
        raise ValueError(
            f"refusing to bind {host}: a non-loopback address needs --public and --token "
            f"(or ${TOKEN_VARIABLE}); the default 127.0.0.1 is reachable from this machine only"
        )
    if token is not None and not (
        MIN_TOKEN <= len(token) <= MAX_TOKEN and all(c.isascii() and (c.isalnum() or c in "-_.~") for c in token)
    ):
        raise ValueError(
            f"--token must be {MIN_TOKEN} to {MAX_TOKEN} characters of letters, digits, -, _, . or ~ "
            "(python -c 'import secrets; print(secrets.token_urlsafe(24))' makes one)"
        )


def allowed_hosts(args: argparse.Namespace) -> list[str]:
    """The host names the server answers to besides loopback's: --host unless it is a wildcard,
    and every --allow-host. A public server on a wildcard address must be told its name."""
    hosts = list(args.allow_host)
    if args.host not in {"0.0.0.0", "::", ""}:
        hosts.append(args.host)
    if args.public and not hosts:
        raise ValueError(f"--host {args.host} listens everywhere: name the host people reach it by with --allow-host")
    return hosts


def _start(app: object, args: argparse.Namespace, token: str | None, page: str = "/") -> int:
    import uvicorn

    host = args.allow_host[0] if args.allow_host else args.host
    suffix = f"{page}?access={token}" if token else page
    print(f"serving on http://{host}:{args.port}{suffix}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def check_envs(settings: object) -> list[str]:
    """Builds each offered env once, before anyone plays: an env named by the operator that cannot
    be built (its data missing) is an error; a default one is left out. Returns what to tell the
    operator: what was left out, what each env warned about (data it fell back from)."""
    import warnings

    from baselines.apps.people.play_api import code_running_warning, offered_envs
    from scope_envs.core.registration import find_env

    notes, kept = [], []
    for name in offered_envs(settings):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                env = find_env(name).make(**settings.env_kwargs.get(name, {}))
                fallbacks = list(env.data_notes)
                env.close()
            except Exception as error:
                if settings.envs is not None:
                    raise ValueError(f"env {name} cannot be built: {error}") from error
                notes.append(f"not offering {name}: {error}")
                continue
        kept.append(name)
        said = [*fallbacks, *(str(w.message) for w in caught)]
        notes.extend(dict.fromkeys(text if text.startswith(name) else f"{name}: {text}" for text in said))
    if settings.envs is None:
        settings.envs = kept
    warning = code_running_warning(kept)
    return [*notes, *([warning] if warning else [])]


def _serve(args: argparse.Namespace) -> int:
    from baselines.apps.people.api_models import ServerSettings, opponent_labels
    from baselines.apps.people.app import create_app
    from baselines.apps.people.study import load_study
    from baselines.apps.people.study_api import participant_links
    from scope_envs.core.specs import check_spec

    token = args.token or os.environ.get(TOKEN_VARIABLE)
    check_bind(args.host, args.public, token)
    opponents = opponent_labels(args.opponent or ["scripted"])
    for spec in opponents.values():
        check_spec(spec)  # a typo said now, not to the first player who picks it
    env_kwargs = per_env_kwargs_of(args)
    study = load_study(args.study) if args.study else None
    if study is not None and args.env is None:  # a study's server offers its env, as the study sets it
        args.env = [study.env]
        env_kwargs.setdefault(study.env, dict(study.env_kwargs))
    db = Path(args.study_db or Path(args.study).with_suffix(".sqlite")) if args.study else None
    settings = ServerSettings(
        opponents=opponents,
        envs=args.env,
        save_path=Path(args.save),
        study=study,
        study_db=db,
        run_dir=Path(args.run) if args.run else None,
        access_token=token,
        env_kwargs=env_kwargs,
        public=args.public,
        hosts=allowed_hosts(args),
    )
    for note in check_envs(settings):
        print(f"scope serve: {note}", file=sys.stderr, flush=True)
    app = create_app(settings)
    if study is not None:
        tokens = {p["id"]: p["token"] for p in app.state.study.store.participants()}
        host = settings.hosts[0] if settings.hosts else args.host
        links = participant_links(f"http://{host}:{args.port}", tokens)
        print(f"study {study.name}: {len(links)} participants, stored in {db}", flush=True)
        for link in links:
            print(f"  {link}{'&access=' + token if token else ''}", flush=True)
    return _start(app, args, token)


def _view(args: argparse.Namespace) -> int:
    from baselines.apps.people.api_models import ServerSettings
    from baselines.apps.people.app import create_app
    from baselines.apps.people.episode_store import read_run_episodes

    token = args.token or os.environ.get(TOKEN_VARIABLE)
    check_bind(args.host, args.public, token)
    run_dir = Path(args.run_dir)
    if not run_dir.exists():
        raise ValueError(f"no run at {run_dir}")
    count = len(read_run_episodes(run_dir))
    print(f"{count} saved episodes in {run_dir}", flush=True)
    app = create_app(
        ServerSettings(run_dir=run_dir, access_token=token, envs=[], public=args.public, hosts=allowed_hosts(args))
    )
    return _start(app, args, token, page="/view")


def _study_export(args: argparse.Namespace) -> int:
    from baselines.apps.people.export import write_study_results

    db = Path(args.db)
    if db.is_file() and db.stat().st_size:
        with db.open("rb") as file:
            if file.read(16) != b"SQLite format 3\x00":  # what sqlite3 would call "file is not a database"
                raise ValueError(f"{db} is not a study database (an SQLite file)")
    out, summary = write_study_results(args.db, args.out)
    print(f"episodes: {out}\nper condition: {out.with_suffix('.summary.csv')}")
    for row in summary:
        print(
            f"  {row['condition']}: outcome {row['outcome_mean']:.3f} "
            f"[{row['ci95_low']:.3f}, {row['ci95_high']:.3f}] over {row['episodes']} episodes"
        )
    return 0


def _export(args: argparse.Namespace) -> int:
    from baselines.apps.people.export import export_episodes

    count = export_episodes(args.source, args.out, args.format)
    loader = "datasets.load_from_disk" if args.format == "hf" else "baselines.training.records.read_records"
    print(f"{count} episodes written to {args.out} (load with {loader})")
    return 0
