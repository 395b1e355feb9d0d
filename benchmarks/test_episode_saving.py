"""What saving a training step's episodes costs (`save_episodes`, baselines.training.episodes):
one step's rollout of a real trainer (the tiny model persuading a Verbalized Sampling persuadee)
with four of its episodes saved (ours) and without saving (the anchor), in episodes."""

from __future__ import annotations

import warnings

import pytest
from people_helpers import one_dialogue_corpus

from baselines.training.config import load_config
from baselines.training.trainer import Trainer

GROUPS, GROUP_SIZE = 2, 4


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    root = tmp_path_factory.mktemp("episode_saving")
    corpus = one_dialogue_corpus(root / "corpus")
    overrides = [
        "env=P4G",
        f"env_kwargs={{persona_source: {corpus}, exchanges: 3}}",
        "policy=tiny",
        "method=vs",
        "simulators=[scripted:people_helpers:VerbalizingPersuadee]",
        f"groups_per_step={GROUPS}",
        f"group_size={GROUP_SIZE}",
        "max_new_tokens=16",
        "save_episodes=4",
        f"output_dir={root / 'run'}",
        "tensorboard=false",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Trainer(load_config(None, overrides))


def rollout(trainer: Trainer, *, saved: bool = False) -> int:
    """One step's training rollout: observed, its sample saved (ours), or played plainly (the anchor)."""
    players, labels = trainer.players(trainer.step, GROUPS)
    trainer.train_rollout = trainer.observed_rollout if saved else trainer.rollout
    episodes = trainer.collect(trainer.step, group_size=GROUP_SIZE, split="train", players=players)
    if saved:
        trainer.episode_saver.save(trainer.step, episodes, labels)
    return len(episodes)


def saved_rollout(trainer: Trainer) -> int:
    return rollout(trainer, saved=True)


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_episode_saving(compare, trainer, side):
    compare("episode-saving", side, lambda: saved_rollout(trainer) if side == "ours" else rollout(trainer), rounds=5)
