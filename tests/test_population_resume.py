"""A population run resumed from an older checkpoint than its newest (the newest damaged) restores
the simulator pool of that checkpoint: the same pool, draws and weights as an uninterrupted run."""

import json
import shutil

import pytest

torch = pytest.importorskip("torch")

from baselines.cli import main  # noqa: E402

POPULATION = [  # the act-level testbed: a step in milliseconds
    "env=PersuasionActs-v1",
    "policy=linear",
    "method=population",
    "simulator_policy=linear",
    "simulators=[mixture:1000@3/spread1]",
    "eval_simulators=[mixture:population]",
    "groups_per_step=3",
    "group_size=2",
    "micro_batch=64",
    "lr=0.05",
    "eval_tasks=1",
    "eval_every=100",
    "tensorboard=false",
    "pool_every=1",
    "pool_size=2",  # a snapshot evicted at every step from step 2 on
    "live_min_share=0",
    "steps=6",
    "checkpoint_every=1",
    "keep_checkpoints=3",
]


def pool_sizes(out):
    return [json.loads(line)["pool/size"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def final_weights(out):
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    return {p.parent.parent.name: torch.load(p, weights_only=True)["weight"] for p in latest.glob("*/policy/policy.pt")}


def test_a_resume_past_a_damaged_newest_checkpoint_restores_that_checkpoints_pool(tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert main(["train", *POPULATION, f"output_dir={whole}"]) == 0
    assert main(["train", *POPULATION, f"output_dir={resumed}"]) == 0
    # the newest checkpoint is damaged: the resume falls back to step 5 and replays step 6
    policy = resumed / "checkpoints" / "step-000006" / "agent" / "policy" / "policy.pt"
    policy.write_bytes(policy.read_bytes()[:10])
    with pytest.warns(UserWarning, match=r"using step-000005"):
        assert main(["train", *POPULATION, f"output_dir={resumed}", "--resume"]) == 0
    assert pool_sizes(resumed) == pool_sizes(whole) == [1, 2, 2, 2, 2, 2]
    expected, got = final_weights(whole), final_weights(resumed)
    assert got.keys() == expected.keys() == {"agent", "user"}
    for side in expected:
        assert torch.equal(got[side], expected[side]), side


def test_a_pool_that_cannot_be_restored_is_refused_not_replaced(tmp_path, capsys):
    """What the purge up to the newest checkpoint left: the snapshots step 5's pool held are gone."""
    out = tmp_path / "run"
    assert main(["train", *POPULATION, f"output_dir={out}"]) == 0
    policy = out / "checkpoints" / "step-000006" / "agent" / "policy" / "policy.pt"
    policy.write_bytes(policy.read_bytes()[:10])
    manifest = json.loads((out / "sim_pool" / "pool.json").read_text())
    purged = [entry["member"]["id"] for entry in manifest["evicted"]]
    manifest["evicted"] = []
    (out / "sim_pool" / "pool.json").write_text(json.dumps(manifest))
    for member in purged:
        shutil.rmtree(out / "sim_pool" / member)
    capsys.readouterr()
    with pytest.warns(UserWarning, match=r"using step-000005"):
        assert main(["train", *POPULATION, f"output_dir={out}", "--resume"]) == 1
    error = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert error.startswith("scope train: the simulator pool of step 5 cannot be restored")
    assert "ckpt-000004" in error and "--overwrite" in error
