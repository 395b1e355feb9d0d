"""A run folder read without its trainer (`baselines.training.run.Run`), and episodes kept by an observer
of the rollout protocol (`baselines.training.episodes`) whichever rollout plays them."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from people_helpers import one_dialogue_corpus

from baselines.cli import main
from baselines.training.episodes import EPISODES_FILE
from baselines.training.records import read_records
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.rollout import RolloutGroup

pytest.importorskip("torch")

VS_SIMULATOR = "scripted:people_helpers:VerbalizingPersuadee"


def tiny_run(root, *extra):
    corpus = one_dialogue_corpus(root / "corpus")
    out = root / "run"
    settings = [f"env_kwargs={{persona_source: {corpus}, exchanges: 2}}", "env=P4G", "policy=tiny", "steps=2"]
    settings += ["groups_per_step=2", "group_size=2", "max_new_tokens=8", "eval_every=100", "eval_tasks=1"]
    settings += ["method=vs", f"simulators=[{VS_SIMULATOR}]", "save_episodes=3", "tensorboard=false"]
    assert main(["train", *settings, f"output_dir={out}", *extra]) == 0
    return out


def assert_vs_candidates_saved(out):
    records = list(read_records(out / EPISODES_FILE))
    assert [r.step for r in records] == [1, 1, 1, 2, 2, 2]
    for record in records:
        user_turns = [e for e in record.log if e["side"] == USER]
        assert user_turns and all(e["vs"]["candidates"][0] == "No thanks." for e in user_turns)
        assert all(e["message"]["content"] in e["vs"]["candidates"] for e in user_turns)
        assert record.messages[AGENT][0]["role"] == "system"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return tiny_run(tmp_path_factory.mktemp("lockstep"))


def test_a_run_started_on_ray_is_evaluated_with_ray_absent(run_dir, tmp_path, monkeypatch, capsys):
    # the config a `scope train ... --ray ADDRESS` run recorded, at an address nothing answers on
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "ray_address": "ray://192.0.2.1:10001"}))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    capsys.readouterr()
    assert main(["eval", str(run_dir / "config.yaml"), f"output_dir={run_dir}"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["step"] == 2 and 0.0 <= result["heldout_success"] <= 1.0
    pytest.importorskip("scipy")
    out = tmp_path / "evaluate"
    arguments = ["evaluate", "--env", "P4G", "--agents", str(run_dir), "--simulators", "scripted", "--tasks", "1"]
    arguments += ["--trials", "1", "--env-arg", f"persona_source={tmp_path / 'corpus'}", "--out", str(out)]
    one_dialogue_corpus(tmp_path / "corpus")
    assert main(arguments) == 0
    assert (out / "evaluation.json").is_file()


def test_scope_eval_plays_on_the_cpu_threads_of_the_run(run_dir, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("cpu_threads applies without a GPU")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert main(["eval", str(run_dir / "config.yaml"), f"output_dir={run_dir}", "cpu_threads=1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_run_loads_its_trained_policy_without_a_trainer(run_dir):
    from baselines.training.run import Run

    run = Run(run_dir)
    assert run.trained_sides() == [AGENT] and run.checkpoint_steps().keys() == {2}
    policy = run.policy()
    assert run.loaded_step == 2 and type(policy).__name__ == "LMPolicy"
    with pytest.raises(ValueError, match="not the 'user' side"):
        run.policy(USER)


def test_lockstep_runs_save_vs_candidates(run_dir):
    assert_vs_candidates_saved(run_dir)


def test_async_runs_save_vs_candidates(tmp_path):
    assert_vs_candidates_saved(tiny_run(tmp_path, "rollout=async"))


@pytest.mark.parametrize("rollout", ["lockstep", "async"])
def test_a_rollout_worker_keeps_each_conversation_with_its_vs_candidates(tmp_path, rollout):
    """What a Ray rollout worker plays (the same class, in its own process there)."""
    from baselines.distributed.rollout_worker import RolloutWorker
    from scope_envs.core.specs import make_policy
    from sims.verbalized import verbalize

    corpus = one_dialogue_corpus(tmp_path / "corpus")
    worker = RolloutWorker("P4G", {"persona_source": str(corpus), "exchanges": 2}, rollout, observe=True)
    env = worker.make_env()
    players = {
        AGENT: make_policy("scripted", env=env, side=AGENT),
        USER: verbalize(make_policy(VS_SIMULATOR, env=env, side=USER), k=5),
    }
    episodes = worker.play_groups([RolloutGroup(3, players)], [0], group_size=2, split="train", key=(0,))
    assert len(episodes) == 2
    for episode in episodes:
        user_turns = [e for e in episode.log if e["side"] == USER]
        assert user_turns and all("vs" in e for e in user_turns)
        assert episode.messages[USER][0]["role"] == "system"


@pytest.mark.parametrize("observe", [False, True])
def test_a_rollout_worker_plays_the_task_a_group_names(tmp_path, observe):
    """A group's `task_id` survives the worker's (and the observer's) re-made groups."""
    from baselines.distributed.rollout_worker import RolloutWorker
    from scope_envs.core.specs import make_policy

    corpus = one_dialogue_corpus(tmp_path / "corpus")
    worker = RolloutWorker("P4G", {"persona_source": str(corpus), "exchanges": 1}, observe=observe)
    env = worker.make_env()
    task = env.task_ids("test")[0]  # not the training split's one dialogue, which the seed would pick
    players = {side: make_policy("scripted", env=env, side=side) for side in (AGENT, USER)}
    episodes = worker.play_groups([RolloutGroup(3, players, task)], [0], group_size=1, split="train", key=(0,))
    assert [episode.scenario_id for episode in episodes] == [task]


def test_an_unknown_rollout_mode_names_the_choices(tmp_path):
    from baselines.distributed.rollout_worker import RolloutWorker
    from baselines.training.config import load_config

    with pytest.raises(ValueError, match=r"rollout must be one of \('lockstep', 'async'\), got 'asynch'"):
        load_config(None, ["env=P4G", "rollout=asynch"])
    with pytest.raises(ValueError, match=r"rollout must be one of \('lockstep', 'async'\)"):
        RolloutWorker("P4G", {}, "asynch")


def test_a_run_a_rollout_worker_and_a_ray_rollout_default_to_one_rollout():
    import inspect

    from baselines.distributed.ray_rollout import RayRollout
    from baselines.distributed.rollout_worker import RolloutWorker
    from baselines.training.config import TrainConfig
    from baselines.training.rollouts import DEFAULT_ROLLOUT

    defaults = {cls: inspect.signature(cls).parameters["rollout"].default for cls in (RolloutWorker, RayRollout)}
    assert set(defaults.values()) == {TrainConfig().rollout} == {DEFAULT_ROLLOUT}


def test_the_training_loop_imports_no_application():
    from test_import_graph import import_graph

    graph = import_graph()
    reached, todo = set(), ["baselines.training.trainer"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph[module])
    applications = sorted(m for m in reached if m.startswith("baselines.apps") or m == "baselines.cli")
    assert not applications, applications
