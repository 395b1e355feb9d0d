"""One spec grammar: every form docs/simulators.md lists, through every entry point that takes a
policy spec (env kwargs and Gymnasium views, training configs, `scope evaluate`, `scope play` and
`scope serve --opponent`), builds the same policy, and round-trips as a label."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest

import sims  # noqa: F401  (registers the `vs` and `persona` wrappers, as any user of sims does)
from baselines.apps.evaluate import build_simulators
from baselines.apps.people.api_models import opponent_labels
from baselines.apps.people.game import build_opponent
from baselines.training.config import load_config
from baselines.training.methods import method_for
from scope_envs.core.dialogue import USER
from scope_envs.core.registration import find_env
from scope_envs.core.specs import Spec, format_spec, make_policy, parse_spec, wrapped

ROOT = Path(__file__).resolve().parents[1]
ENV = "PersuasionActs"
OFFLINE = ("openai:", "anthropic:")  # need a key and a server to build: parsed only


def documented_forms() -> list[tuple[str, str]]:
    """(form, example) of each row of the grammar's table, every example of a row."""
    text = (ROOT / "docs" / "simulators.md").read_text()
    table = text.split("## The spec grammar", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    forms = []
    for form, examples in rows:
        for example in re.findall(r"`([^`]+)`", examples):
            forms.append((form.strip().strip("`"), example))
    return forms


FORMS = documented_forms()


def test_the_table_lists_every_kind_of_form():
    kinds = {form for form, _ in FORMS}
    assert {"scripted", "vs:SPEC", "vsK:SPEC", "persona:SPEC", "pool:RUN", "RUN"} <= kinds
    assert len(FORMS) >= 10


@pytest.mark.parametrize(("form", "example"), FORMS)
def test_every_form_round_trips(form, example):
    assert format_spec(parse_spec(example)) == example


def test_wrappers_peel_and_compose():
    assert parse_spec("vs3:family:3") == Spec((("vs", 3),), "family:3")
    assert parse_spec("vs:persona:scripted") == Spec((("vs", None), ("persona", None)), "scripted")
    assert parse_spec("hf:gpt2") == Spec((), "hf:gpt2")  # a backend name is never a wrapper
    assert parse_spec("vsx:thing") == Spec((), "vsx:thing")
    assert wrapped("vs", "persona:scripted", 5) == "vs5:persona:scripted"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch")
    from baselines.training.config import TrainConfig
    from baselines.training.trainer import Trainer

    run = tmp_path_factory.mktemp("grammar") / "population"
    config = TrainConfig(
        env=ENV,
        policy="linear",
        method="population",
        simulator_policy="family:0@3",
        simulators=["family:0@3"],
        steps=2,
        groups_per_step=2,
        group_size=2,
        eval_every=2,
        eval_tasks=1,
        pool_every=1,
        tensorboard=False,
        output_dir=str(run),
    ).validate()
    Trainer(config).run(progress=False)
    return {"runs/population": str(run), "runs/cotrain": str(run)}


def concrete(example: str, runs: dict[str, str]) -> str:
    for documented, real in runs.items():
        example = example.replace(documented, real)
    return example


def wrapper_chain(policy) -> list[str]:
    chain = []
    while policy is not None:
        chain.append(type(policy).__name__)
        policy = getattr(policy, "simulator", None)
    return chain


@pytest.mark.parametrize(("form", "example"), [f for f in FORMS if not f[1].startswith(OFFLINE)])
def test_every_form_builds_alike_through_every_entry_point(form, example, runs):
    spec = concrete(example, runs)
    env = find_env(ENV).make()
    # `scope evaluate --simulators` (and `scope fidelity`): every form, a label that is the spec
    players = build_simulators(spec, env, USER)
    assert players
    if form in ("pool:RUN", "RUN"):
        for single in (
            lambda: make_policy(spec, env=env, side=USER),
            lambda: gym.make(f"scope/{ENV}-v0", simulator=spec),
        ):
            with pytest.raises(ValueError, match="unknown policy spec"):
                single()
        return
    (player,) = players
    assert player.label == spec and format_spec(parse_spec(player.label)) == spec
    expected = wrapper_chain(make_policy(spec, env=env, side=USER))
    assert wrapper_chain(player.policy) == expected
    # env kwargs: the Gymnasium view's simulator
    view = gym.make(f"scope/{ENV}-v0", simulator=spec)
    assert wrapper_chain(view.unwrapped.partner) == expected
    # a training config's simulators
    config = load_config(None, [f"env={ENV}", "method=ensemble", f"simulators=['{spec}']"])
    _, policy = method_for(config).opponents(SimpleNamespace(probe=env)).pick(0, 0)
    assert wrapper_chain(policy) == expected
    # `scope play --human --opponent` and `scope serve --opponent`
    assert opponent_labels([spec]) == {spec: spec}
    assert wrapper_chain(build_opponent(spec, env, USER)) == expected
