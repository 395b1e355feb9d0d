"""`scope plan`: its arithmetic checked against real transformers/peft/torch objects and the
model cards' published sizes, its verdicts, and the shipped Qwen3-4B configs."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest
import torch
from memory_helpers import saved_activations
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from baselines.apps.plan import (
    GB,
    KNOWN_ARCHITECTURES,
    LINEAR_MODULES,
    Architecture,
    architecture_from_config,
    hints,
    lora_parameters,
    plan,
)
from baselines.cli import main
from baselines.training.config import load_config, shipped_configs

# the model cards' "Number of Parameters" and "(Non-Embedding)", in billions, as rounded there
PUBLISHED = {
    "qwen3-0.6b": (0.6, 0.44),
    "qwen3-1.7b": (1.7, 1.4),
    "qwen3-4b": (4.0, 3.6),
    "qwen3-4b-instruct-2507": (4.0, 3.6),
    "qwen3-8b": (8.2, 6.95),
}
QWEN3_4B = [path for path in shipped_configs() if "qwen3_4b" in path.stem]
SMALL = Qwen3Config(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    tie_word_embeddings=True,
)


def _config_of(architecture: Architecture) -> Qwen3Config | LlamaConfig:
    kind = Qwen3Config if architecture.qk_norm else LlamaConfig
    return kind(
        vocab_size=architecture.vocab_size,
        hidden_size=architecture.hidden_size,
        intermediate_size=architecture.intermediate_size,
        num_hidden_layers=architecture.layers,
        num_attention_heads=architecture.heads,
        num_key_value_heads=architecture.kv_heads,
        head_dim=architecture.head_dim,
        tie_word_embeddings=architecture.tied_embeddings,
    )


@pytest.mark.parametrize("key", sorted(KNOWN_ARCHITECTURES))
def test_known_architectures_count_the_parameters_transformers_builds(key: str) -> None:
    architecture = KNOWN_ARCHITECTURES[key]
    config = _config_of(architecture)
    with torch.device("meta"):  # shapes only: no memory
        model = (Qwen3ForCausalLM if architecture.qk_norm else LlamaForCausalLM)(config)
    assert architecture.parameters() == sum(p.numel() for p in model.parameters())
    assert architecture_from_config(config, key) == dataclasses.replace(architecture, name=key)


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_known_architectures_match_the_published_sizes(key: str) -> None:
    architecture = KNOWN_ARCHITECTURES[key]
    total, non_embedding = PUBLISHED[key]
    embeddings = architecture.vocab_size * architecture.hidden_size * (1 if architecture.tied_embeddings else 2)
    assert abs(architecture.parameters() / 1e9 - total) < 0.05
    assert abs((architecture.parameters() - embeddings) / 1e9 - non_embedding) < 0.05
    assert KNOWN_ARCHITECTURES["smollm2-135m"].parameters() == 134_515_008  # "135M"


@pytest.mark.parametrize("targets", [list(LINEAR_MODULES), ["q_proj", "v_proj"], "all-linear", None])
def test_lora_parameter_count_is_what_peft_trains(targets: list[str] | str | None) -> None:
    from peft import LoraConfig, get_peft_model

    lora = {"r": 8, "lora_alpha": 16} | ({"target_modules": targets} if targets is not None else {})
    model = get_peft_model(Qwen3ForCausalLM(SMALL), LoraConfig(task_type="CAUSAL_LM", **lora))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_parameters(architecture_from_config(SMALL, "small"), lora) == trained


def test_kv_cache_bytes_are_those_of_a_real_cache() -> None:
    model = Qwen3ForCausalLM(SMALL).to(torch.bfloat16)
    cache = model(torch.randint(0, 512, (3, 20)), use_cache=True).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert held == 3 * 20 * architecture_from_config(SMALL, "small").kv_bytes_per_token(2)


def _saved_for_backward(model: torch.nn.Module, body: torch.nn.Module, autocast: bool) -> int:
    """Bytes of the distinct activations autograd keeps for the backward pass of one forward of an
    unpadded batch (not the parameters, nor the copies of them autocast makes: those are weights)."""

    def forward() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            body(torch.randint(0, 512, (2, 40)))

    return sum(size for size, _ in saved_activations(model, forward).values())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("targets", [None, tuple(LINEAR_MODULES), ("q_proj", "v_proj")])
def test_activation_bytes_are_within_ten_percent_of_what_autograd_keeps(
    dtype: str, targets: tuple[str, ...] | None
) -> None:
    """As the trainer trains: in float32, or under bfloat16 autocast with float32 master weights
    (full fine-tuning) or float32 adapters on a bfloat16 base (LoRA)."""
    from peft import LoraConfig, get_peft_model

    architecture = architecture_from_config(SMALL, "small")
    model = Qwen3ForCausalLM(SMALL)
    body = model.model
    if targets is not None:
        model = model.to(getattr(torch, dtype))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=8, target_modules=list(targets)))
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.data = parameter.data.float()
        body = model.base_model.model.model
    measured = _saved_for_backward(model, body, autocast=dtype == "bfloat16")
    width = 4 if dtype == "float32" else 2
    frozen = targets is not None
    layer = architecture.layer_activation_bytes(width, frozen=frozen, lora_rank=8, lora_targets=targets or ())
    predicted = 80 * (architecture.layers * layer + architecture.outside_layers_activation_bytes(width, frozen=frozen))
    assert 0.9 * measured <= predicted <= 1.1 * measured


def test_optimizer_and_gradient_bytes_are_those_of_a_real_adamw_step(tmp_path: Path) -> None:
    model = Qwen3ForCausalLM(SMALL)
    model.save_pretrained(tmp_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 512, (1, 8)), labels=torch.randint(0, 512, (1, 8))).loss.backward()
    optimizer.step()
    states = sum(
        state[key].numel() * state[key].element_size()
        for state in optimizer.state.values()
        for key in state
        if key != "step"
    )
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    result = plan(load_config(None, ["env=P4G", f"policy=hf:{tmp_path}", "kl_coef=0"]))
    assert result.optimizer == states
    assert result.gradients == grads
    assert result.weights == sum(p.numel() * p.element_size() for p in model.parameters())


def test_shared_base_and_pool_adapters() -> None:
    lora = {"r": 16, "target_modules": list(LINEAR_MODULES)}
    base = ["env=P4G", "policy=hf:Qwen/Qwen3-4B", "dtype=bfloat16", f"lora={lora}", "groups_per_step=16"]
    single = plan(load_config(None, base))
    population = plan(load_config(None, [*base, "method=population", "pool_size=4"]))
    architecture = KNOWN_ARCHITECTURES["qwen3-4b"]
    adapter = lora_parameters(architecture, lora)
    assert single.weights == architecture.parameters() * 2 + adapter * 4
    assert population.weights == architecture.parameters() * 2 + 2 * adapter * 4  # one base for both adapters
    assert population.optimizer == 2 * adapter * 8
    assert population.pool == 4 * adapter * 4
    other_base = plan(load_config(None, [*base, "method=cotrain", "simulator_policy=hf:Qwen/Qwen3-1.7B"]))
    assert other_base.weights == single.weights + KNOWN_ARCHITECTURES["qwen3-1.7b"].parameters() * 2 + (
        lora_parameters(KNOWN_ARCHITECTURES["qwen3-1.7b"], lora) * 4
    )


def test_population_co_training_on_p4g_fits_one_141_gb_gpu_with_room_for_the_engine() -> None:
    config = load_config("p4g_qwen3_4b_population")
    assert (config.method, config.pool_size, config.groups_per_step, config.group_size) == ("population", 4, 16, 8)
    assert (config.dtype, config.gpus, config.gpu_memory_gb) == ("bfloat16", 1, 141) and config.lora
    assert plan(config).fits
    with_engine = plan(dataclasses.replace(config, generation_engine="vllm", vllm_gpu_memory_utilization=0.4))
    assert with_engine.fits and with_engine.generation == int(0.4 * 141 * GB)
    full_fp32 = dataclasses.replace(config, lora=None, dtype="float32", gradient_checkpointing=False)
    assert not plan(full_fp32).fits  # the paper's release needs 8 GPUs for it


def test_hints_make_a_run_that_does_not_fit_fit() -> None:
    config = load_config(None, ["env=P4G", "policy=hf:Qwen/Qwen3-4B", "gpu_memory_gb=80", "max_model_len=4096"])
    assert not plan(config).fits
    advice = hints(config)
    assert advice[0] == "dtype: bfloat16" and any(item.startswith("lora:") for item in advice)
    assert "a GPU with more memory" not in advice
    assert hints(dataclasses.replace(config, gpu_memory_gb=1))[-1] == "a GPU with more memory"


@pytest.mark.parametrize("path", QWEN3_4B, ids=lambda path: path.stem)
def test_scope_plan_prints_a_verdict_for_every_shipped_qwen3_4b_config(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", path.stem]) == 0
    out = capsys.readouterr().out
    for row in ("weights", "gradients", "optimizer", "activations", "logits", "KV cache", "pool", "total"):
        assert f"  {row} " in out
    assert "verdict: fits" in out


def test_scope_plan_says_what_does_not_fit_and_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "p4g_qwen3_4b_population", "lora=null", "dtype=float32", "gpu_memory_gb=80"]) == 1
    out = capsys.readouterr().out
    assert "verdict: does not fit" in out and "hint: set" in out and "lora:" in out
    assert main(["plan", "p4g_qwen3_4b_population", "policy=linear"]) == 2
    assert "plans language models" in capsys.readouterr().err
    assert main(["plan", "p4g_qwen3_4b_population", "lora={r: 8, target_modules: [attn]}"]) == 2
    assert "not linear modules" in capsys.readouterr().err


def test_tiny_spec_is_planned_from_the_model_the_tests_build() -> None:
    # 4 GB: the default 8 x 4096-token padded micro-batch keeps a float32 copy of its mask in each layer (1.2 GB)
    result = plan(load_config(None, ["env=P4G", "policy=tiny", "gpu_memory_gb=4"]))
    assert result.architectures["agent"].name == "tiny" and result.fits


def test_an_unknown_model_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="nor a known architecture"):
        plan(load_config(None, ["env=P4G", "policy=hf:nobody/no-such-model"]))
