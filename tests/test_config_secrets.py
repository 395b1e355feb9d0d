"""A key given in a config value (a judge's or simulator's options) never reaches what a run saves
or prints, and a resume or evaluation takes it from the config given then, or the environment."""

import gymnasium
import pytest
import yaml

pytest.importorskip("torch")

from baselines.cli import main
from baselines.training.run import Run
from baselines.training.secrets import REDACTED, redacted
from scope_envs.core.registration import REGISTERED, register_dialogue_env
from scope_envs.persuasion_acts import PersuasionActsEnv

KEY = "sk-test-secret-0123456789abcdef"
ROTATED = "sk-test-rotated-0123456789abcdef"


class KeyedActsEnv(PersuasionActsEnv):
    """The act-level testbed taking an API judge's options, as a config passes them in `env_kwargs`."""

    made_with: list = []

    def __init__(self, *, judge=None, **kwargs):
        super().__init__(**kwargs)
        KeyedActsEnv.made_with.append(judge)


@pytest.fixture(scope="module", autouse=True)
def keyed_acts():
    info = register_dialogue_env(
        "KeyedActs",
        "test_config_secrets:KeyedActsEnv",
        "the act-level testbed with a judge's options",
        rollout="scope_envs.persuasion_acts.rollout:collect",
        policies={"family": "scope_envs.persuasion_acts.simulators:make_family"},
    )
    yield
    REGISTERED.pop("KeyedActs", None)
    for env_id in (info.agent_id, info.user_id):
        gymnasium.envs.registry.pop(env_id, None)


def settings(key, *extra):
    return [
        "env=KeyedActs",
        f"env_kwargs={{judge: {{spec: 'openai:judge', api_key: {key}, headers: {{Authorization: 'Bearer {key}'}}}}}}",
        "policy=linear",
        "simulators=[family:0@3]",
        "eval_simulators=[family:100]",
        "groups_per_step=2",
        "group_size=2",
        "eval_tasks=1",
        "eval_every=1",
        "tensorboard=false",
        "checkpoint_every=1",
        *extra,
    ]


def test_a_runs_files_and_output_hold_no_key_and_a_resume_reads_it_again(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *settings(KEY, "steps=2", f"output_dir={out}")]) == 0
    assert KeyedActsEnv.made_with[-1]["api_key"] == KEY  # the run itself had its key
    printed = capsys.readouterr()
    files = [path for path in out.rglob("*") if path.is_file()]
    assert {"config.yaml", "state.json", "metrics.jsonl", "episodes.jsonl"} <= {path.name for path in files}
    for text in [path.read_bytes() for path in files] + [printed.out.encode(), printed.err.encode()]:
        assert KEY.encode() not in text and KEY[3:].encode() not in text
    saved = yaml.safe_load((out / "config.yaml").read_text())["env_kwargs"]["judge"]
    assert saved == {"spec": "openai:judge", "api_key": REDACTED, "headers": {"Authorization": REDACTED}}

    # a resume with the key rotated: the same run, and the env gets the key given now
    assert main(["train", *settings(ROTATED, "steps=3", f"output_dir={out}", "--resume")]) == 0
    assert KeyedActsEnv.made_with[-1]["api_key"] == ROTATED
    assert not any(ROTATED[3:].encode() in path.read_bytes() for path in out.rglob("*") if path.is_file())
    # a run read from its folder: no key, not the marker either (the backend reads its environment)
    assert Run(out).config.env_kwargs["judge"] == {"spec": "openai:judge", "headers": {}}


def test_what_counts_as_a_credential():
    values = {
        "policy": "hf:hf-internal-testing/tiny-random-gpt2",  # a model name, not a key
        "max_new_tokens": 48,
        "env_kwargs": {"nl_judge": {"api_key": "anything", "token": "t", "password": "p", "model_secret": "s"}},
        "simulators": [f"openai:model?key={KEY}", "scripted"],
        "about": "sent with Bearer abc123",
    }
    assert redacted(values) == {
        "policy": "hf:hf-internal-testing/tiny-random-gpt2",
        "max_new_tokens": 48,
        "env_kwargs": {"nl_judge": dict.fromkeys(("api_key", "token", "password", "model_secret"), REDACTED)},
        "simulators": [f"openai:model?key={REDACTED}", "scripted"],
        "about": f"sent with Bearer {REDACTED}",
    }
