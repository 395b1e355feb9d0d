"""`--resume` refuses a config that changes what the run's steps compute, naming each change; it
takes the keys that do not (more steps, logging, checkpoints kept) and records them."""

import json

import pytest
import yaml

pytest.importorskip("torch")

from training_helpers import TINY_POPULATION

from baselines.cli import main
from baselines.training.config import RESUMABLE_CHANGES, load_config, resume_changes


def last_error(capsys):
    return capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]


def test_a_resume_refuses_changes_to_what_the_steps_compute(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY_POPULATION, f"output_dir={out}"]) == 0
    before = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    capsys.readouterr()
    changed = ["lr=0.001", "seed=3", "pool_size=3", "steps=3"]
    assert main(["train", *TINY_POPULATION, *changed, f"output_dir={out}", "--resume"]) == 1
    error = last_error(capsys)
    assert error.startswith("scope train: --resume would change what the run computes (")
    assert "(pool_size 2 -> 3; lr 1e-05 -> 0.001; seed 0 -> 3)" in error  # in config order; steps may change
    assert "--overwrite" in error
    assert sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file()) == before


def test_a_resume_may_extend_the_run_and_change_what_it_logs(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *TINY_POPULATION, f"output_dir={out}"]) == 0
    more = ["steps=3", "keep_checkpoints=3", "save_episodes=0", "about=extended"]
    assert main(["train", *TINY_POPULATION, *more, f"output_dir={out}", "--resume"]) == 0
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert (saved["steps"], saved["about"]) == (3, "extended")


def test_what_a_resume_may_change_and_what_an_older_config_lacks():
    config = load_config(None, [*TINY_POPULATION, "steps=9", "wandb=true", "output_dir=elsewhere"])
    recorded = yaml.safe_load(yaml.safe_dump(vars(load_config(None, TINY_POPULATION))))
    assert resume_changes(recorded, config) == {}
    assert set(RESUMABLE_CHANGES) >= {"steps", "output_dir", "wandb"}
    # a config saved before a key existed ran with its default
    del recorded["live_min_share"]
    assert resume_changes(recorded, config) == {}
    changed = load_config(None, [*TINY_POPULATION, "live_min_share=0.5"])
    assert resume_changes(recorded, changed) == {"live_min_share": (0.0, 0.5)}


def test_a_run_saved_before_pool_draws_existed_drew_per_group():
    """Its steps drew a pool member per group: resumed with today's default (per batch) it would
    silently change what its remaining steps compute, so the resume refuses."""
    recorded = yaml.safe_load(yaml.safe_dump(vars(load_config(None, TINY_POPULATION))))
    del recorded["pool_draw"]
    assert resume_changes(recorded, load_config(None, TINY_POPULATION)) == {"pool_draw": ("group", "batch")}
    assert resume_changes(recorded, load_config(None, [*TINY_POPULATION, "pool_draw=group"])) == {}
