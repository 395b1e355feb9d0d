"""Simulator fidelity: each metric on hand-built cases, the P4G human reference, `scope fidelity`."""

import json
import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from baselines.apps.fidelity import fidelity_report
from baselines.cli import main
from scope_envs.core.agreement import tagger_quality
from scope_envs.p4g.env import P4GEnv
from scope_envs.p4g.human import (
    ACTS,
    annotated_turns,
    annotation_agreement,
    human_reference,
    persuadee_act,
    stated_donations,
)
from sims.diagnostics import distinct_n
from sims.fidelity import (
    act_distance,
    compare,
    distribution_gap,
    diversity,
    entropy_bits,
    equal_size_distinct,
)


def test_entropy_in_bits():
    assert entropy_bits(["a", "a", "b", "b"]) == pytest.approx(1.0)
    assert entropy_bits(["a", "b", "c", "d"]) == pytest.approx(2.0)
    assert entropy_bits(["a"] * 5) == 0.0
    assert entropy_bits([]) == 0.0


def test_diversity_of_a_collapsed_and_a_varied_simulator():
    collapsed = [["Hi there!", "No."], ["hi there", "No thanks."], ["Hi, there.", "No."]]
    report = diversity(collapsed, act_of=lambda text: "refuse" if text.startswith("No") else "greet")
    assert report.conversations == 3 and report.turns_per_conversation == 2.0
    assert report.first_reply_entropy == 0.0 and report.first_reply_unique_share == pytest.approx(1 / 3)
    assert report.first_reply_cluster_entropy == 0.0
    assert report.words_per_turn == pytest.approx((2 + 1 + 2 + 2 + 2 + 1) / 6)  # words, not punctuation
    assert report.acts == {"greet": 0.5, "refuse": 0.5} and report.act_entropy == pytest.approx(1.0)
    assert report.first_act_entropy == 0.0
    varied = diversity([["I love kids."], ["What is this charity?"], ["Not today."], ["Sure, why not"]])
    assert varied.first_reply_entropy == pytest.approx(2.0) and varied.first_reply_unique_share == 1.0
    assert varied.distinct_1 > diversity(collapsed).distinct_1
    assert varied.act_entropy is None
    with pytest.raises(ValueError, match="at least one conversation"):
        diversity([])


def test_distribution_gap_gives_w1_an_interval_and_the_peoples_split_half_floor():
    shifted = distribution_gap([0.0, 1.0], [1.0, 2.0])
    assert shifted.wasserstein == pytest.approx(1.0) and shifted.low <= 1.0 <= shifted.high
    apart = distribution_gap([0.0, 0.0, 0.0], [2.0, 2.0, 2.0])
    assert apart.wasserstein == pytest.approx(2.0) and apart.low == apart.high == 2.0
    assert apart.human_floor == 0.0, "people who all agree are their own perfect match"
    same = distribution_gap([0.5, 1.0], [1.0, 0.5])
    assert same.wasserstein == 0.0
    # a simulator drawn like the people is within their split-half floor; a shifted one is far above it
    rng = np.random.default_rng(0)
    people = rng.normal(0, 1, 400)
    alike = distribution_gap(rng.normal(0, 1, 400), people)
    assert 0.05 < alike.human_floor < 0.25 and alike.wasserstein < alike.human_floor
    shifted = distribution_gap(rng.normal(1, 1, 400), people)
    assert shifted.low < 1.0 < shifted.high and shifted.low > 5 * shifted.human_floor
    gap = shifted
    assert not hasattr(gap, "ks_p_value")
    with pytest.raises(ValueError, match="at least one value"):
        distribution_gap([], [1.0])


def test_act_distance_is_zero_for_equal_and_one_for_disjoint_distributions():
    assert act_distance({"a": 0.5, "b": 0.5}, {"b": 0.5, "a": 0.5}) == 0.0
    assert act_distance({"a": 1.0}, {"b": 1.0}) == pytest.approx(1.0)
    between = act_distance({"a": 1.0}, {"a": 0.5, "b": 0.5})
    assert 0 < between < 1


def test_tagger_quality_on_a_hand_built_case():
    quality = tagger_quality(["a", "a", "b", "b"], ["a", "b", "b", "b"])
    assert quality.accuracy == 0.75 and quality.majority == 0.5 and quality.units == 4
    assert quality.kappa == pytest.approx((0.75 - 0.5) / (1 - 0.5))  # chance agreement (2*1 + 2*3) / 16
    assert quality.f1 == {"a": pytest.approx(2 / 3), "b": pytest.approx(0.8)}
    assert quality.floor == pytest.approx(act_distance({"a": 0.25, "b": 0.75}, {"a": 0.5, "b": 0.5}))
    perfect = tagger_quality(["a", "b"], ["a", "b"])
    assert perfect.kappa == 1.0 and perfect.floor == 0.0
    with pytest.raises(ValueError):
        tagger_quality(["a"], [])


def test_distinct_n_at_equal_size_removes_the_sample_size_effect():
    small = ["the cat sat"] * 2
    assert distinct_n(small, 1) == 0.5
    assert equal_size_distinct(small, 1, 3) == 1.0  # three words of one turn: all distinct
    varied = [f"word{i} other{i} more{i}" for i in range(300)]
    repeated = ["the same few words"] * 300
    assert equal_size_distinct(varied, 1, 12) == 1.0 and equal_size_distinct(repeated, 1, 12) == pytest.approx(4 / 12)
    # a sample twice as large has a lower distinct-2 at full size, the same at equal size
    vocabulary = np.random.default_rng(1).choice([f"w{i}" for i in range(12)], size=(400, 3))
    texts = [" ".join(words) for words in vocabulary]
    assert distinct_n(texts, 2) < distinct_n(texts[:200], 2)
    assert equal_size_distinct(texts, 2, 300) == pytest.approx(equal_size_distinct(texts[:200], 2, 300), abs=0.03)
    with pytest.raises(ValueError, match="fewer than"):
        equal_size_distinct(small, 1, 100)


def test_compare_is_per_conversation_and_leaves_unknown_outcomes_out():
    fidelity = compare(
        [["I'll give $1", "more words here"], ["no"]],
        [["yes $1"], ["nope"], ["maybe"]],
        simulated_outcomes=[1.0, 0.0],
        human_outcomes=[1.0, None, 0.0],
        act_of=lambda text: "money" if "$" in text else "talk",
        tagger_floor=0.05,
    )
    assert fidelity.outcome.n_human == 2 and fidelity.outcome.wasserstein == 0.0
    assert fidelity.length.n_simulated == 2 and fidelity.length.n_human == 3, "one length per conversation"
    assert fidelity.length.mean_simulated == pytest.approx(((3 + 3) / 2 + 1) / 2)
    assert fidelity.acts.distance == pytest.approx(
        act_distance({"money": 1 / 3, "talk": 2 / 3}, {"money": 1 / 3, "talk": 2 / 3})
    )
    assert fidelity.acts.tagger_floor == 0.05 and 0 <= fidelity.acts.human_floor <= 1
    assert fidelity.actual is None
    assert compare([["a"]], [["b"]]).outcome is None and compare([["a"]], [["b"]]).acts is None
    alike = compare([["x"]], [["same"], ["same"], ["same"], ["same"]], act_of=lambda text: "talk")
    assert alike.acts.human_floor == 0.0


@pytest.mark.parametrize(
    ("text", "act"),
    [
        ("I'll donate $0.50.", "provide-amount"),
        ("No, I don't want to donate right now.", "disagree-donation"),
        ("Yes, I'd like to donate to them.", "agree-donation"),
        ("I'm not sure, I don't trust charities much.", "negative-reaction"),
        ("What does Save the Children actually do?", "ask-org-info"),
        ("That's wonderful, they sound great.", "positive-reaction"),
        ("I see.", "neutral-reaction"),
    ],
)
def test_the_persuadee_act_rules(text, act):
    assert persuadee_act(text) == act


def test_human_persuadees_of_the_corpus(p4g_dir):
    env = P4GEnv(persona_source=p4g_dir)
    reference = human_reference(env, split="test", limit=30)
    assert reference.side == "user" and reference.outcome == "donation" and len(reference.conversations) == 30
    test_ids = set(env.task_ids("test"))
    for conversation in reference.conversations:
        assert conversation.task_id in test_ids and conversation.turns
        assert conversation.outcome is None or 0.0 <= conversation.outcome <= 2.0
        assert conversation.actual is None or 0.0 <= conversation.actual <= 2.0
    with pytest.raises(ValueError, match="needs corpus personas"):
        human_reference(P4GEnv(persona_source="synthetic"))


def test_the_people_state_amounts_that_are_compared_with_stated_amounts(p4g_dir):
    """The env's donation is the amount a simulator states: the people's outcome is what they
    stated (300_info.xlsx, B5), not what they paid (B6), which differs in many dialogues."""
    pytest.importorskip("openpyxl")
    reference = human_reference(P4GEnv(persona_source=p4g_dir), split="train")
    stated = {c.task_id: c for c in reference.conversations if c.outcome is not None}
    assert len(stated) > 50 and len(stated) < len(reference.conversations), "only annotated dialogues state one"
    assert any(c.outcome != c.actual for c in stated.values())
    known = stated_donations(p4g_dir)
    assert all(stated[t].outcome == known[t] for t in stated)
    assert reference.actual_outcome is None, "the env records no actual donation to compare"


def test_the_act_tagger_is_validated_on_turns(p4g_dir):
    pytest.importorskip("openpyxl")
    turns = annotated_turns(p4g_dir)
    assert 2500 < len(turns) < 4000, "turns, not the 4,847 sentences"
    quality = annotation_agreement(p4g_dir)
    assert quality.units == len(turns) and quality.accuracy > quality.majority + 0.1
    assert 0.2 < quality.kappa < 0.6 and set(quality.f1) <= set(ACTS)
    assert 0 < quality.floor < 0.2


def test_scope_fidelity_on_the_scripted_p4g_simulator_against_people(p4g_dir, tmp_path, capsys):
    code = main(
        [
            *("fidelity", "scripted", "--env", "P4G", "--env-arg", f"persona_source={p4g_dir}"),
            *("--conversations", "20", "--out", str(tmp_path)),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "fidelity.json").read_text())
    people, scripted = report["rows"]
    assert people["simulator"] == "people" and scripted["simulator"] == "scripted"
    assert scripted["fidelity"]["outcome"]["n_simulated"] == 20
    acts = scripted["fidelity"]["acts"]
    assert 0 <= acts["distance"] <= 1 and acts["tagger_floor"] == pytest.approx(report["tagger"]["floor"])
    assert report["tagger"]["units"] > 2500 and "kappa" in report["tagger"]
    for gap in (scripted["fidelity"]["outcome"], scripted["fidelity"]["length"]):
        assert gap["low"] <= gap["wasserstein"] <= gap["high"] and gap["human_floor"] >= 0
    words = report["equal_words"]
    totals = [
        r["diversity"]["words_per_turn"] * r["diversity"]["turns_per_conversation"] * 20 for r in (people, scripted)
    ]
    assert words == pytest.approx(min(totals), abs=1), "the smallest row's size"
    assert people["diversity"]["equal_words"] == scripted["diversity"]["equal_words"] == words
    # the rule-based persuadee answers every persona's greeting the same way: collapsed across personas
    assert scripted["diversity"]["first_reply_entropy"] < people["diversity"]["first_reply_entropy"]
    text = (tmp_path / "fidelity.md").read_text()
    assert "Against the people" in text and "Cohen's kappa" in text and "tagger floor" in text and "KS" not in text
    assert "fidelity.md" in capsys.readouterr().out


def test_an_env_without_human_data_gets_the_diversity_report():
    report = fidelity_report("PersuasionActs", ["family:0@3", "family:0@10"], conversations=40)
    assert report["reference"] is None and [r["simulator"] for r in report["rows"]] == ["family:0@3", "family:0@10"]
    sharp, sharper = (r["diversity"] for r in report["rows"])
    assert sharper["act_entropy"] is None and "fidelity" not in report["rows"][0]
    assert not math.isnan(sharp["distinct_2"])


def test_a_bad_simulator_is_refused_clearly(capsys):
    assert main(["fidelity", "nosuchbackend:x", "--env", "PersuasionActs", "--conversations", "2"]) == 2
    assert "unknown policy spec" in capsys.readouterr().err
    assert main(["fidelity", "scripted", "--env", "PersuasionActs", "--conversations", "0"]) == 2
    assert main(["fidelity", "linear", "--env", "PersuasionActs", "--conversations", "2"]) == 2
    assert "not text" in capsys.readouterr().err
