"""Simulator fidelity: each metric on hand-built cases, the P4G human reference, `scope fidelity`."""

import json
import math

import pytest

pytest.importorskip("scipy")

from baselines.cli import main
from baselines.fidelity import fidelity_report
from scope_envs.p4g.env import P4GEnv
from scope_envs.p4g.human import annotation_agreement, human_reference, persuadee_act
from sims.fidelity import act_distance, compare, distribution_gap, diversity, entropy_bits


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


def test_distribution_gap_on_hand_built_samples():
    shifted = distribution_gap([0.0, 1.0], [1.0, 2.0])
    assert shifted.wasserstein == pytest.approx(1.0)
    assert shifted.ks_statistic == pytest.approx(0.5)
    apart = distribution_gap([0.0, 0.0, 0.0], [2.0, 2.0, 2.0])
    assert apart.wasserstein == pytest.approx(2.0) and apart.ks_statistic == 1.0
    same = distribution_gap([0.5, 1.0], [1.0, 0.5])
    assert same.wasserstein == 0.0 and same.ks_statistic == 0.0 and same.ks_p_value == 1.0
    with pytest.raises(ValueError, match="at least one value"):
        distribution_gap([], [1.0])


def test_act_distance_is_zero_for_equal_and_one_for_disjoint_distributions():
    assert act_distance({"a": 0.5, "b": 0.5}, {"b": 0.5, "a": 0.5}) == 0.0
    assert act_distance({"a": 1.0}, {"b": 1.0}) == pytest.approx(1.0)
    between = act_distance({"a": 1.0}, {"a": 0.5, "b": 0.5})
    assert 0 < between < 1


def test_compare_leaves_unknown_outcomes_out():
    fidelity = compare(
        [["I'll give $1"], ["no"]],
        [["yes $1"], ["nope"], ["maybe"]],
        simulated_outcomes=[1.0, 0.0],
        human_outcomes=[1.0, None, 0.0],
        act_of=lambda text: "money" if "$" in text else "talk",
    )
    assert fidelity.outcome.n_human == 2 and fidelity.outcome.wasserstein == 0.0
    assert fidelity.length.n_simulated == 2 and fidelity.length.n_human == 3
    assert fidelity.act_js_distance == pytest.approx(
        act_distance({"money": 0.5, "talk": 0.5}, {"money": 1 / 3, "talk": 2 / 3})
    )
    assert compare([["a"]], [["b"]]).outcome is None and compare([["a"]], [["b"]]).act_js_distance is None


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
    with pytest.raises(ValueError, match="needs corpus personas"):
        human_reference(P4GEnv(persona_source="synthetic"))


def test_the_act_rules_agree_with_the_corpus_annotation_more_than_chance(p4g_dir):
    pytest.importorskip("openpyxl")
    accuracy, majority, sentences = annotation_agreement(p4g_dir)
    assert sentences > 4000 and accuracy > majority + 0.1


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
    assert 0 <= scripted["fidelity"]["act_js_distance"] <= 1
    # the rule-based persuadee answers every persona's greeting the same way: collapsed across personas
    assert scripted["diversity"]["first_reply_entropy"] < people["diversity"]["first_reply_entropy"]
    assert "Against the people" in (tmp_path / "fidelity.md").read_text()
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
