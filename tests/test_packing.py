"""Samples sharing their first prompt trained as one packed row (`baselines.training.packing`):
the same log-probs and gradients as the samples read one by one, fewer tokens read."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from baselines.training.policy import LMPolicy  # noqa: E402
from scope_envs.core.rollout import Sample  # noqa: E402
from sims.hf_backend import HFSimulator  # noqa: E402
from sims.testing import tiny_chat_model  # noqa: E402


def sample(prompt, *turns):
    """A chained sequence: the prompt, then (generated, said) turns; generated tokens are trained."""
    ids, mask = list(prompt), [0] * len(prompt)
    for generated, said in turns:
        ids += generated + said
        mask += [1] * len(generated) + [0] * len(said)
    return Sample(ids, mask, [0.0] * len(ids), len(prompt))


GROUP_A = [10, 11, 12, 13, 14, 15]
GROUP_B = [20, 21, 22]
SAMPLES = [
    sample(GROUP_A, ([30, 31, 32], [40, 41]), ([33, 34], [])),
    sample(GROUP_A, ([30, 35], [42]), ([36, 37, 38], [])),
    sample(GROUP_B, ([50, 51, 52, 53], [])),
    sample(GROUP_A, ([60], [43, 44, 45]), ([61, 62], [])),
    sample(GROUP_B, ([54], [46]), ([55], [])),
]


def policy(pack, lora=None, attention="sdpa"):
    model, tokenizer = tiny_chat_model(0)
    model.config._attn_implementation = attention
    return LMPolicy(HFSimulator(model, tokenizer=tokenizer), lora=lora, pack_samples=pack)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("lora", [None, {"r": 4, "target_modules": ["q_proj", "v_proj"]}])
def test_packed_samples_give_the_log_probs_and_gradients_of_the_samples_read_one_by_one(attention, lora):
    results = []
    for pack in (False, True):
        trained = policy(pack, lora, attention)
        logprobs, mask, entropy = trained.sequence_logprobs(SAMPLES)
        (logprobs * mask * torch.arange(1, mask.shape[1] + 1)).sum().backward()
        results.append((logprobs.detach(), mask, entropy, [p.grad.clone() for p in trained.trainable_parameters()]))
    (one, mask, one_entropy, one_grads), (packed, packed_mask, packed_entropy, packed_grads) = results
    assert torch.equal(mask, packed_mask)
    torch.testing.assert_close(packed, one, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(packed_entropy, one_entropy, rtol=1e-4, atol=1e-5)
    for a, b in zip(packed_grads, one_grads):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-6)


def test_a_group_is_read_once_where_its_samples_agree():
    trained = policy(True)
    widths = []
    decoder = trained.model.get_decoder()
    hook = decoder.register_forward_pre_hook(
        lambda m, args, kwargs: widths.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        trained.sequence_logprobs(SAMPLES)
    finally:
        hook.remove()
    group_a = 6 + 7 + 6 + 6  # the prompt once, then each sample's rest
    group_b = 3 + 4 + 3
    assert widths == [torch.Size([2, max(group_a, group_b)])]  # two rows, not five
