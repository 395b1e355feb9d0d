"""Episodes saved by training (`save_episodes`), and their export to JSONL and Hugging Face `datasets`."""

from __future__ import annotations

import json

import pytest
from people_helpers import train_tiny_run

from baselines.apps.people.export import export_episodes
from baselines.cli import main
from baselines.training.episodes import EPISODES_FILE, choose
from baselines.training.records import read_records


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory)


def test_training_saves_a_seeded_sample_of_each_step_with_roles_rewards_and_vs_candidates(run_dir):
    records = list(read_records(run_dir / EPISODES_FILE))
    assert [r.step for r in records] == [1, 1, 1, 2, 2, 2]  # save_episodes per step, beside metrics.jsonl
    for record in records:
        assert record.source == "train" and record.env == "P4G" and record.players["agent"] == "trained"
        spec = "vs5:scripted:people_helpers:VerbalizingPersuadee"  # the run's config, not a label
        assert record.simulator == spec and set(record.reward_info) == {"agent", "user"}
        assert record.players["user"] == "vs5:scripted:people_helpers:VerbalizingPersuadee"
        assert "components" in record.reward_info["agent"] and record.end_reason
        sides = [entry["side"] for entry in record.log]
        assert sides[:2] == ["agent", "user"] and len(sides) == record.turns
        user_turns = [e for e in record.log if e["side"] == "user"]
        assert all(e["vs"]["candidates"][0] == "No thanks." for e in user_turns)
        assert all(e["message"]["content"] in e["vs"]["candidates"] for e in user_turns)
        assert record.messages["agent"][0]["role"] == "system"
    assert len({r.scenario_id for r in records}) == 1


def test_the_sample_is_drawn_by_the_seed_rule():
    assert choose(3, 4, 0, 1, 7919) == choose(3, 4, 0, 1, 7919)
    assert len(set(choose(4, 4, 0, 1, 7919))) == 4 and choose(0, 4, 0, 1, 7919) == [] and choose(9, 2, 1) == [0, 1]


def test_export_hf_loads_back_with_load_from_disk(run_dir, tmp_path, capsys):
    import datasets

    assert main(["export", str(run_dir), str(tmp_path / "ds"), "--format", "hf"]) == 0
    assert "6 episodes written" in capsys.readouterr().out
    dataset = datasets.load_from_disk(str(tmp_path / "ds"))
    records = list(read_records(run_dir / EPISODES_FILE))
    assert len(dataset) == len(records)
    row = dataset[0]
    assert row["env"] == "P4G" and row["step"] == 1 and row["seed"] == records[0].seed
    assert row["agent_reward"] == records[0].rewards["agent"]
    assert row["agent_messages"][0]["role"] == "system"
    assert [m["content"] for m in row["agent_messages"]] == [m["content"] or "" for m in records[0].messages["agent"]]
    assert json.loads(row["agent_components"]) == records[0].reward_info["agent"]["components"]
    assert row["simulator"] == "vs5:scripted:people_helpers:VerbalizingPersuadee"


def test_episodes_saved_with_an_opponent_label_are_named_by_the_runs_config(run_dir, tmp_path):
    from baselines.apps.people.episode_store import read_run_episodes

    old = tmp_path / "old_run"
    old.mkdir()
    (old / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    lines = [json.loads(line) for line in (run_dir / EPISODES_FILE).read_text().splitlines()]
    (old / EPISODES_FILE).write_text("".join(json.dumps({**r, "simulator": "simulator0"}) + "\n" for r in lines))
    simulators = {r["simulator"] for r in read_run_episodes(old)}
    assert simulators == {"vs5:scripted:people_helpers:VerbalizingPersuadee"}


def test_export_jsonl_round_trips_and_refuses_to_overwrite(run_dir, tmp_path):
    out = tmp_path / "episodes.jsonl"
    assert export_episodes(run_dir, out, "jsonl") == 6
    assert [r.to_dict() for r in read_records(out)] == [r.to_dict() for r in read_records(run_dir / EPISODES_FILE)]
    with pytest.raises(ValueError, match="exists"):
        export_episodes(run_dir, out, "jsonl")
    assert main(["export", str(tmp_path / "nothing"), str(tmp_path / "x"), "--format", "jsonl"]) == 2


def test_a_resumed_run_keeps_only_the_episodes_of_its_checkpointed_steps(tmp_path):
    from baselines.training.episodes import prepare_episodes_file
    from baselines.training.records import EpisodeRecord, append_records

    path = tmp_path / EPISODES_FILE
    base = dict(
        env="E",
        scenario_id="s",
        seed=0,
        players={},
        log=[],
        messages={},
        rewards={},
        reward_info={},
        end_reason="done",
        turns=0,
    )
    append_records(path, [EpisodeRecord(**base, step=step) for step in (1, 2, 3)])

    prepare_episodes_file(path, 2)  # resumed from the checkpoint of step 2
    assert [r.step for r in read_records(path)] == [1, 2]
    prepare_episodes_file(path, 0)  # a fresh start
    assert not path.exists()
