import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sims import SimulatorError, make_simulator  # noqa: E402
from sims.hf_backend import HFSimulator  # noqa: E402
from sims.testing import VIEW, check_simulator, tiny_chat_model  # noqa: E402
from sims.vllm_backend import vllm_available  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_chat_model()
    return HFSimulator(model, tokenizer=tokenizer, max_new_tokens=12, name="tiny")


def test_tiny_model_conformance(tiny):
    check_simulator(tiny)


def test_tokens_and_logprobs_are_exactly_what_was_sampled(tiny):
    reply = tiny.respond(VIEW, seed=3)
    prompt = reply.metadata["prompt_ids"]
    assert prompt == tiny.render(VIEW)
    full = torch.tensor([prompt + reply.token_ids])
    with torch.no_grad():
        logits = tiny.model(full).logits[0, len(prompt) - 1 : -1].float() / tiny.temperature
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(reply.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(expected, torch.tensor(reply.logprobs), atol=1e-4)  # a trainer recomputes the same values


def test_each_row_keeps_its_own_seed_in_a_batch(tiny):
    alone = tiny.respond(VIEW, seed=11)
    other_view = [VIEW[0], {"role": "user", "content": "something much longer " * 5}]
    batch = tiny.respond_batch([other_view, VIEW, VIEW], seeds=[5, 11, 12])
    assert batch[1].token_ids == alone.token_ids  # left padding and batch-mates change nothing
    assert tiny.respond(VIEW, seed=11).token_ids == alone.token_ids


def test_greedy_and_truncation(tiny):
    greedy = HFSimulator(tiny.model, tokenizer=tiny.tokenizer, temperature=0.0, max_new_tokens=5)
    first, second = greedy.respond(VIEW, seed=1), greedy.respond(VIEW, seed=2)
    assert first.token_ids == second.token_ids and len(first.token_ids) <= 5
    assert first.metadata["finish_reason"] in {"stop", "length"}


def test_unrenderable_view_is_a_simulator_error(tiny):
    import copy

    tokenizer = copy.deepcopy(tiny.tokenizer)
    tokenizer.chat_template = "{{ raise_exception('no tools here') }}"
    with pytest.raises(SimulatorError, match="cannot render"):
        HFSimulator(tiny.model, tokenizer=tokenizer).respond(VIEW)


def test_hf_spec_loads_a_local_checkpoint(tiny, tmp_path):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = make_simulator(f"hf:{tmp_path}", max_new_tokens=6)
    assert (
        loaded.respond(VIEW, seed=4).token_ids
        == HFSimulator(tiny.model, tokenizer=tiny.tokenizer, max_new_tokens=6).respond(VIEW, seed=4).token_ids
    )


def test_smollm2_real_chat_model():
    pytest.importorskip("gguf")
    try:
        simulator = make_simulator("smollm2", max_new_tokens=24, temperature=0.7)
    except ImportError as error:
        pytest.skip(str(error))
    check_simulator(simulator, episodes=False)
    reply = simulator.respond(VIEW, seed=0)
    assert len(reply.text.split()) >= 2 and reply.token_ids and len(reply.logprobs) == len(reply.token_ids)


def test_vllm_fails_clearly_without_cuda():
    usable, why = vllm_available()
    if usable:
        pytest.skip("vLLM is usable here; its GPU tests cover it")
    with pytest.raises(ImportError, match="vllm:some/model"):
        make_simulator("vllm:some/model")
    with pytest.raises(ImportError, match="vllm-async:some/model"):
        make_simulator("vllm-async:some/model")
    assert why


def test_json_replies_are_started_for_the_model(tiny):
    from sims.hf_backend import json_opening
    from sims.verbalized import CANDIDATES_SCHEMA, VerbalizedSampling

    opening = json_opening(CANDIDATES_SCHEMA)
    assert opening == '{"responses": [{"text": "'
    reply = tiny.respond_json(VIEW, CANDIDATES_SCHEMA, seed=0)
    assert reply.text.startswith(opening) and reply.metadata["json_opening"] == opening
    vs = VerbalizedSampling(tiny, k=3).respond(VIEW, seed=0)  # a random model: verbalizes or falls back, never raises
    assert vs.metadata["vs_fallback"] in {True, False}


def test_a_prompt_shared_by_rows_is_computed_once_and_replies_are_unchanged(tiny):
    """n replies to one state: the prompt is run through the model once, its cache copied to the
    rows, and every row's tokens and log-probs are those it gets alone."""
    seeds = [21, 22, 23, 24]
    alone = [tiny.respond(VIEW, seed=seed) for seed in seeds]
    prompt_rows = []
    hook = tiny.model.register_forward_hook(
        lambda module, args, kwargs, out: prompt_rows.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        shared = tiny.respond_batch([VIEW] * 4, seeds=seeds)
    finally:
        hook.remove()
    assert prompt_rows[0][0] == 1 and all(shape[0] == 4 for shape in prompt_rows[1:])
    for mine, reference in zip(shared, alone):
        assert mine.token_ids == reference.token_ids
        assert mine.logprobs == pytest.approx(reference.logprobs, abs=1e-4)


def test_verbalized_sampling_asks_for_its_candidate_lists_in_one_batch(tiny):
    """VS's structured requests for several replies are decoded together, not one after another,
    and each row's JSON reply is the one it gets alone."""
    from sims.verbalized import CANDIDATES_SCHEMA, VerbalizedSampling

    seeds = [31, 32, 33]
    alone = [tiny.respond_json(VIEW, CANDIDATES_SCHEMA, seed=seed) for seed in seeds]
    together = tiny.respond_json_batch([VIEW] * 3, CANDIDATES_SCHEMA, seeds=seeds)
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert [r.text for r in together] == [r.text for r in alone]
    decoded_rows = []
    hook = tiny.model.register_forward_hook(
        lambda module, args, kwargs, out: decoded_rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        VerbalizedSampling(tiny, k=3, retries=0).respond_batch([VIEW] * 3, seeds=seeds)
    finally:
        hook.remove()
    assert 3 in decoded_rows[: tiny.max_new_tokens * 3 // 2]  # the first attempt's three lists decode as one batch
