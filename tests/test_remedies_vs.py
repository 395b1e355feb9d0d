"""Verbalized Sampling's draw is honoured everywhere: uniform over the listed candidates (`random`,
the paper's main runs and the default) or by their verbalized probabilities (`prob`), on the
act-level families, the v1 mixture families, the LLM wrapper, the spec grammar and the `vs` method."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from baselines.training.config import load_config
from baselines.training.methods import method_for
from scope_envs.core.dialogue import USER
from scope_envs.core.specs import make_policy
from scope_envs.persuasion_acts import ActsBatch, PersuasionActsEnv
from scope_envs.persuasion_acts.acts import ASK_AMOUNT, PROPOSITION
from scope_envs.persuasion_acts.env import rules_of
from scope_envs.persuasion_acts.mixture import MixtureFamily
from scope_envs.persuasion_acts.model import load_reference
from scope_envs.persuasion_acts.population import load_population
from scope_envs.persuasion_acts.simulators import ActFamily
from sims import ScriptedSimulator
from sims.testing import VIEW
from sims.verbalized import VerbalizedSampling, verbalize

DRAWS = 40_000


def frequencies(simulator, features, mask, n=DRAWS):
    replies, logprobs = simulator.act(np.repeat(features, n, 0), np.repeat(mask, n, 0), np.random.default_rng(0))
    return np.bincount(replies, minlength=mask.shape[1]) / n, logprobs


def assert_matches(observed, expected, n=DRAWS):
    """Each frequency within 5 binomial standard deviations of its exact expectation."""
    tolerance = 5 * np.sqrt(expected * (1 - expected) / n) + 1e-9
    assert np.all(np.abs(observed - expected) <= tolerance), (observed, expected)


def act_state():
    batch = ActsBatch(load_reference().personas("train", 1))
    batch.step_agent(np.array([0]), np.array([ASK_AMOUNT]))
    return batch.user_features()


def test_act_family_draws_uniformly_by_default_and_by_reference_probability_with_prob():
    features, mask = act_state()
    allowed = int(mask[0].sum())
    sharp = ActFamily(0, gamma=3.0)
    reference = np.exp(sharp.log_reference(features, mask))[0]
    uniform = np.where(mask[0], 1 / allowed, 0.0)
    assert np.abs(reference - uniform).max() > 0.1  # the two draws differ measurably at this state
    # every allowed reply listed: what is drawn is the draw's own distribution over them
    random, random_logprobs = frequencies(sharp.verbalized(allowed), features, mask)
    prob, _ = frequencies(sharp.verbalized(allowed, draw="prob"), features, mask)
    assert_matches(random, uniform)
    assert_matches(prob, reference)
    assert np.allclose(random_logprobs, -np.log(allowed))
    # a few listed: the random draw's log-probability is uniform over the k listed, the other's is not
    _, few_random = frequencies(sharp.verbalized(3), features, mask, n=2000)
    _, few_prob = frequencies(sharp.verbalized(3, draw="prob"), features, mask, n=2000)
    assert np.allclose(few_random, -np.log(3)) and np.ptp(few_prob) > 0.1


def test_mixture_family_honours_the_draw():
    batch = ActsBatch(load_population().personas("test", 1), 12, rules_of(1))
    batch.step_agent(np.array([0]), np.array([PROPOSITION]))
    features, mask = batch.user_features()
    allowed = int(mask[0].sum())
    family = MixtureFamily(3, 10.0)
    types = family.types_of(features, verbalized=True)
    reference = np.exp(family.log_reference(features, mask, types))[0]
    uniform = np.where(mask[0], 1 / allowed, 0.0)
    assert np.abs(reference - uniform).max() > 0.1
    assert_matches(frequencies(family.verbalized(allowed), features, mask)[0], uniform)
    assert_matches(frequencies(family.verbalized(allowed, draw="prob"), features, mask)[0], reference)


class SkewedCandidates(ScriptedSimulator):
    """Answers the Verbalized Sampling instruction with the same five candidates, one far likelier."""

    name = "skewed"
    TEXTS = ("No thanks.", "Maybe later.", "Tell me more.", "Who runs it?", "Okay, [DONATE $1]")
    PROBABILITIES = (0.6, 0.1, 0.1, 0.1, 0.1)

    def reply(self, messages, tools, rng):
        pairs = zip(self.TEXTS, self.PROBABILITIES)
        return json.dumps({"responses": [{"text": t, "probability": p} for t, p in pairs]})


@pytest.mark.parametrize(("draw", "expected"), [("random", (0.2,) * 5), ("prob", SkewedCandidates.PROBABILITIES)])
def test_the_llm_wrapper_draws_as_asked(draw, expected):
    n = 4000
    replies = VerbalizedSampling(SkewedCandidates(), k=5, draw=draw).respond_batch([VIEW] * n, seeds=list(range(n)))
    observed = np.array([sum(r.text == text for r in replies) for text in SkewedCandidates.TEXTS]) / n
    assert_matches(observed, np.array(expected), n)


def test_verbalize_passes_the_draw_to_a_simulator_with_its_own_form():
    assert verbalize(ActFamily(0, 3.0), k=5).draw == "random"
    assert verbalize(ActFamily(0, 3.0), k=5, draw="prob").draw == "prob"
    assert verbalize(MixtureFamily(3, 10.0), k=5, draw="prob").draw == "prob"
    assert verbalize(SkewedCandidates(), k=5, draw="prob").draw == "prob"
    with pytest.raises(ValueError, match="draw must be one of"):
        verbalize(ActFamily(0, 3.0), k=5, draw="top")


@pytest.mark.parametrize(
    ("spec", "name", "draw"),
    [
        ("family:0@3/vs5", "family:0@3/vs5", "random"),
        ("family:0@3/vs5prob", "family:0@3/vs5prob", "prob"),
        ("vs5:family:0@3", "family:0@3/vs5", "random"),
        ("vsprob5:family:0@3", "family:0@3/vs5prob", "prob"),
        ("vsprob:family:0@3", "family:0@3/vs5prob", "prob"),
        ("mixture:3@10/vs5prob/spread0.5", "mixture:3@10/vs5prob/spread0.5", "prob"),
        ("vsprob5:mixture:population", "mixture:population/vs5prob", "prob"),
    ],
)
def test_specs_name_the_draw_and_round_trip(spec, name, draw):
    simulator = make_policy(spec)
    assert (simulator.name, simulator.draw) == (name, draw)
    assert make_policy(simulator.name).name == name


def test_the_spec_grammar_names_the_draw_and_its_errors_say_so():
    assert make_policy("vsprob3:scripted:test_remedies_vs:SkewedCandidates").draw == "prob"
    assert make_policy("vs3:scripted:test_remedies_vs:SkewedCandidates").draw == "random"
    with pytest.raises(ValueError, match=r"/vsKprob"):
        make_policy("family:0/vsprob")
    with pytest.raises(ValueError, match=r"/vsKprob"):
        make_policy("mixture:3/vs5random")


@pytest.mark.parametrize("draw", ["random", "prob"])
def test_the_vs_method_gives_partners_that_draw_as_configured(draw):
    for env, simulators in (
        ("PersuasionActs", "[family:0@3]"),
        ("P4G", "[scripted:test_remedies_vs:SkewedCandidates]"),
    ):
        config = load_config(None, [f"env={env}", "method=vs", f"simulators={simulators}", f"vs_draw={draw}"])
        method = method_for(config)
        trainer = SimpleNamespace(probe=PersuasionActsEnv() if env == "PersuasionActs" else None)
        (partner,) = method.partners(trainer)
        assert partner.draw == draw
        wrapper = "vs" if draw == "random" else "vsprob"
        assert method.opponent_spec("simulator0") == f"{wrapper}5:{config.simulators[0]}"
        # the spec saved with episodes builds a partner that draws the same way
        assert make_policy(method.opponent_spec("simulator0"), env=trainer.probe, side=USER).draw == draw
    with pytest.raises(ValueError, match="vs_draw must be one of"):
        load_config(None, ["env=PersuasionActs", "method=vs", "vs_draw=top"])
