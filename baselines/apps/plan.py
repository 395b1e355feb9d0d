"""`scope plan`: the GPU memory of a training run, from its config, before anything is loaded.

The arithmetic follows how the trainer holds memory:

* Learners: the sides the method trains, and the snapshots it keeps resident (`Method.memory`).
* LoRA: a frozen base in `dtype`; each adapter's parameters, gradients and two AdamW states in
  float32; the KL reference is the base with adapters disabled (no memory); learners of one base
  share it; a population's resident pool snapshots are adapters on that base.
* Full fine-tuning: float32 master weights, gradients and two AdamW states per learner, plus the
  `dtype` copy autocast keeps during a forward pass when `dtype` is narrower; a KL reference is a
  frozen copy in `dtype`; a pool snapshot is a whole model in `dtype`.
* Activations of one micro-batch (`micro_batch` x `max_model_len` tokens), counted tensor by tensor
  the way Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
  Models", section 4.1) count a GPT layer, for transformers' Llama/Qwen layers: RMSNorm (which
  keeps a float32 copy of its input), grouped-query attention with SDPA/flash kernels (no
  seq x seq score matrix is kept), a SwiGLU MLP, and what peft's adapters keep; with gradient
  checkpointing, one `hidden` tensor per layer plus one layer recomputed (their section 4.2).
* Logits at their peak: the `dtype` logits and three float32 tensors of their size alive at once
  (the log-softmax kept for the backward pass, and the exponential and product of the entropy,
  or the gradients in the backward pass), for all positions or for one `logprob_chunk` of
  positions at a time (chunks recomputed in the backward pass).
* The attention mask: transformers hands SDPA a boolean `[batch, 1, L, L]` mask when a batch is
  padded (one tensor, shared by every layer; none for a micro-batch of one sample, which runs
  causal). SDPA converts it to the query's dtype in every attention call, and the fused kernels
  keep that copy for the backward pass: `micro_batch` x `max_model_len`^2 bytes, plus `dtype`
  bytes per element for each layer (one layer with gradient checkpointing, the one recomputed).
  A padded batch also makes transformers repeat the key and value heads to the query heads
  (grouped-query SDPA only runs unmasked), so each layer keeps them at the query's width. At a
  generation's prefill, `generation_batch` x `max_model_len`^2 bytes and one converted copy.
* Sequences are capped at `max_model_len` tokens (prompt and generated turns) on every generation
  path, so that is the longest sample. A chat template that re-renders earlier turns (Qwen3 drops
  the reasoning of past turns) makes an episode one sample per turn instead of one: the memory of
  a micro-batch is the same, the forward passes per step are up to `max_turns` times as many.
* Generation with transformers: the KV cache of `generation_batch` prompts of `max_model_len`
  tokens, plus one layer's prefill working set; it happens between updates, so the total counts
  the larger of the training and generation working sets. With vLLM the engine holds
  `vllm_gpu_memory_utilization` of the GPU throughout, and training fits in the rest.

The trainer is one process on one device, so device 0 holds the whole run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baselines.training.config import TrainConfig, find_config, load_config
from baselines.training.methods import method_for
from scope_envs.core.specs import split_spec

GB = 10**9
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
FLOAT32 = 4
ADAMW_STATES = 2
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# peft's own default targets for Llama/Qwen-family models when a LoRA config names none
PEFT_DEFAULT_TARGETS = ("q_proj", "v_proj")
STANDARD_LORA = {"r": 16, "lora_alpha": 32, "target_modules": list(LINEAR_MODULES)}


@dataclass(frozen=True)
class Architecture:
    """The shapes of a decoder-only transformer (Llama / Qwen2 / Qwen3 family, SwiGLU MLP)."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool
    qk_norm: bool = False  # Qwen3: an RMSNorm over each query and key head
    qkv_bias: bool = False  # Qwen2: biases on the query, key and value projections

    @property
    def query_size(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear module of one layer."""
        h, q, kv, i = self.hidden_size, self.query_size, self.kv_size, self.intermediate_size
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def layer_parameters(self) -> int:
        linear = sum(a * b for a, b in self.linear_shapes().values())
        norms = 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)
        bias = self.query_size + 2 * self.kv_size if self.qkv_bias else 0
        return linear + norms + bias

    def parameters(self) -> int:
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return embeddings + self.layers * self.layer_parameters() + self.hidden_size

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes

    def layer_activation_bytes(
        self,
        dtype_bytes: int,
        *,
        frozen: bool = False,
        lora_rank: int = 0,
        lora_targets: tuple[str, ...] = (),
        padded: bool = False,
    ) -> int:
        """Bytes one decoder layer keeps for its backward pass, per token, counted tensor by tensor
        (as Korthikanti et al. count a GPT layer) for transformers' Llama/Qwen layers with fused
        SDPA/flash attention and no dropout, trained as the trainer trains them: in float32, or
        under autocast to a narrower `dtype_bytes` (float32 master weights in full fine-tuning; a
        base in that dtype with float32 adapters in LoRA).

        An RMSNorm keeps its float32 input (and, when its weight trains, its normalized output:
        float32 under autocast, where the residual stream stays float32); attention keeps the
        rotated query and key, the value and its output (o_proj's input) and a float32 log-sum-exp
        per head; the SwiGLU MLP keeps the gate and up outputs and the activation. A trained linear
        layer keeps its input: all of them in full fine-tuning, only the LoRA-adapted ones on a
        frozen base (through the adapter, which also keeps its rank-r hidden state). Autocast casts
        the input of every linear layer separately, so each keeps a copy of its own; in float32,
        q/k/v share one input and gate/up another. In a `padded` batch (an attention mask)
        transformers repeats the key and value heads to the query heads before SDPA, and the
        kernel keeps the repeated ones."""
        h, q, kv, i, d = self.hidden_size, self.query_size, self.kv_size, self.intermediate_size, dtype_bytes
        autocast = d < FLOAT32
        norms = 2 * FLOAT32 * (h + 1) + (0 if frozen else 2 * (FLOAT32 if autocast else d) * h)
        head_norms = 0
        if self.qk_norm:
            head_norms = FLOAT32 * (q + kv + self.heads + self.kv_heads) + (0 if frozen else d * (q + kv))
        keys_kept = q if padded else kv
        attention = d * (q + 2 * keys_kept) + d * q + FLOAT32 * self.heads
        mlp = 3 * d * i
        trained = LINEAR_MODULES if not frozen else lora_targets
        inputs_of = {"q_proj": h, "k_proj": h, "v_proj": h, "o_proj": 0, "gate_proj": h, "up_proj": h, "down_proj": i}
        if autocast:
            if frozen:  # an adapter casts o_proj's input too: the attention output is not its input
                inputs_of["o_proj"] = q
            inputs = d * sum(inputs_of[name] for name in trained)
        else:
            inputs = d * sum(_shared_inputs(trained, inputs_of).values())
        return norms + head_norms + attention + mlp + inputs + d * lora_rank * len(lora_targets)

    def outside_layers_activation_bytes(self, dtype_bytes: int, *, frozen: bool = False) -> int:
        """Per token: the final norm's float32 input, and its output and the LM head's input when they train."""
        normalized = FLOAT32 if dtype_bytes < FLOAT32 else dtype_bytes
        return FLOAT32 * (self.hidden_size + 1) + (0 if frozen else (normalized + dtype_bytes) * self.hidden_size)

    def checkpointed_bytes(self, dtype_bytes: int, *, frozen: bool = False) -> int:
        """Per token, with gradient checkpointing: each layer's input (the residual stream, float32
        under autocast with float32 master weights)."""
        width = FLOAT32 if dtype_bytes < FLOAT32 and not frozen else dtype_bytes
        return self.layers * width * self.hidden_size


def _shared_inputs(targets: tuple[str, ...], inputs_of: dict[str, int]) -> dict[str, int]:
    """The size of each distinct input tensor of the adapted modules: q/k/v share one, gate/up another."""
    groups = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up"}
    return {groups.get(name, name): inputs_of[name] for name in targets}


# Published configs (config.json of each model on the Hugging Face Hub), for planning offline;
# `tests/test_plan.py` checks their parameter counts against the totals the model cards state.
KNOWN_ARCHITECTURES = {
    "qwen3-0.6b": Architecture("Qwen3-0.6B", 151936, 1024, 3072, 28, 16, 8, 128, True, qk_norm=True),
    "qwen3-1.7b": Architecture("Qwen3-1.7B", 151936, 2048, 6144, 28, 16, 8, 128, True, qk_norm=True),
    "qwen3-4b": Architecture("Qwen3-4B", 151936, 2560, 9728, 36, 32, 8, 128, True, qk_norm=True),
    "qwen3-4b-instruct-2507": Architecture(
        "Qwen3-4B-Instruct-2507", 151936, 2560, 9728, 36, 32, 8, 128, True, qk_norm=True
    ),
    "qwen3-8b": Architecture("Qwen3-8B", 151936, 4096, 12288, 36, 32, 8, 128, False, qk_norm=True),
    "smollm2-135m": Architecture("SmolLM2-135M", 49152, 576, 1536, 30, 9, 3, 64, True),
    "smollm2-135m-instruct": Architecture("SmolLM2-135M-Instruct", 49152, 576, 1536, 30, 9, 3, 64, True),
}


def architecture_from_config(config: Any, name: str) -> Architecture:
    """An `Architecture` from a transformers `PretrainedConfig`."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return Architecture(
        name=name,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        qk_norm=config.model_type.startswith("qwen3"),
        qkv_bias=config.model_type == "qwen2" or bool(getattr(config, "attention_bias", False)),
    )


def resolve_architecture(spec: str) -> Architecture:
    """The architecture a policy spec names: `tiny`, `smollm2`, or `hf:MODEL_OR_PATH` (a local
    folder, the local Hugging Face cache, the table of known models, then the Hub unless
    HF_HUB_OFFLINE is set)."""
    backend, argument = split_spec(spec)
    if backend == "tiny":
        from sims.testing import tiny_chat_model

        model, _ = tiny_chat_model(0)
        return architecture_from_config(model.config, "tiny")
    if backend == "smollm2":
        from transformers import AutoConfig

        from sims.hf_backend import smollm2_path

        return architecture_from_config(AutoConfig.from_pretrained(smollm2_path()), "SmolLM2-135M-Instruct")
    if backend != "hf" or not argument:
        raise ValueError(f"policy {spec!r}: the memory plan plans language models (tiny, smollm2, hf:MODEL)")
    from transformers import AutoConfig

    if Path(argument).is_dir():
        return architecture_from_config(AutoConfig.from_pretrained(argument), argument)
    try:
        return architecture_from_config(AutoConfig.from_pretrained(argument, local_files_only=True), argument)
    except OSError:
        pass
    known = KNOWN_ARCHITECTURES.get(argument.rsplit("/", 1)[-1].lower())
    if known is not None:
        return known
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        raise ValueError(
            f"{argument!r} is neither a local folder, in the Hugging Face cache, nor a known architecture "
            f"({', '.join(a.name for a in KNOWN_ARCHITECTURES.values())}), and HF_HUB_OFFLINE is set"
        )
    try:
        return architecture_from_config(AutoConfig.from_pretrained(argument), argument)
    except OSError as error:
        raise ValueError(f"cannot read the config of {argument!r}: {error}") from error


def lora_parameters(architecture: Architecture, lora: dict[str, Any]) -> int:
    """Trainable parameters of a peft LoRA adapter: r x (in + out) per adapted linear module,
    plus any `modules_to_save` (trained whole)."""
    rank = int(lora.get("r", 8))
    shapes = architecture.linear_shapes()
    per_layer = sum(rank * (a + b) for name, (a, b) in shapes.items() if name in lora_targets(lora))
    embedding = architecture.vocab_size * architecture.hidden_size
    saved = {"lm_head": embedding, "embed_tokens": embedding}
    extra = sum(saved.get(name, 0) for name in lora.get("modules_to_save") or ())
    return architecture.layers * per_layer + extra


def lora_targets(lora: dict[str, Any]) -> tuple[str, ...]:
    targets = lora.get("target_modules")
    if targets is None:
        return PEFT_DEFAULT_TARGETS
    if targets == "all-linear":
        return LINEAR_MODULES
    if isinstance(targets, str):  # peft: a regular expression over full module names
        return tuple(name for name in LINEAR_MODULES if re.fullmatch(targets, _module_path(name)))
    unknown = [name for name in targets if name.rsplit(".", 1)[-1] not in LINEAR_MODULES]
    if unknown:
        raise ValueError(f"lora target_modules {unknown} are not linear modules of a layer: {LINEAR_MODULES}")
    return tuple(name.rsplit(".", 1)[-1] for name in targets)


def _module_path(name: str) -> str:
    block = "mlp" if name in {"gate_proj", "up_proj", "down_proj"} else "self_attn"
    return f"model.layers.0.{block}.{name}"


@dataclass
class Plan:
    """Bytes on the device, by what holds them, and the verdict."""

    config: TrainConfig
    architectures: dict[str, Architecture]  # by learner side
    weights: int
    gradients: int
    optimizer: int
    pool: int
    activations: int
    logits: int
    mask: int  # the training forward's attention mask (the generation one is in `generation`)
    generation: int  # the transformers KV cache and prefill working set, or the vLLM engine's share
    notes: list[str]
    samples_per_episode: str = "1"  # the training samples of one side's episode (see `template_samples`)

    @property
    def resident(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.pool

    @property
    def total(self) -> int:
        training = self.activations + self.logits + self.mask
        if self.config.generation_engine == "vllm":
            return self.resident + training + self.generation
        return self.resident + max(training, self.generation)

    @property
    def capacity(self) -> int:
        return int(self.config.gpu_memory_gb * GB)

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def headroom(self) -> int:
        return self.capacity - self.total


def plan(config: TrainConfig) -> Plan:
    """The memory of `config` on its device, computed from the model architectures only."""
    dtype = DTYPE_BYTES[config.dtype]
    method = method_for(config)
    memory = method.memory()
    specs = memory.models
    architectures = {side: resolve_architecture(spec) for side, spec in specs.items()}
    kl = {side: learner.kl_coef for side, learner in method.learners().items()}
    resident_pool = memory.resident_snapshots
    snapshot_side = memory.snapshot_side
    weights = gradients = optimizer = pool = 0
    notes = []
    if config.lora:
        bases = {spec: architectures[side] for side, spec in specs.items()}  # learners of one base share it
        weights += sum(base.parameters() * dtype for base in bases.values())
        for architecture in architectures.values():
            adapter = lora_parameters(architecture, config.lora)
            weights += adapter * FLOAT32
            gradients += adapter * FLOAT32
            optimizer += adapter * FLOAT32 * ADAMW_STATES
        if resident_pool:
            pool = resident_pool * lora_parameters(architectures[snapshot_side], config.lora) * FLOAT32
        if len(architectures) > 1 and len(set(specs.values())) == 1:
            notes.append("agent and simulator adapters share one frozen base")
    else:
        for side, architecture in architectures.items():
            count = architecture.parameters()
            autocast_copy = count * dtype if dtype < FLOAT32 else 0
            reference = count * dtype if kl[side] > 0 else 0
            weights += count * FLOAT32 + autocast_copy + reference
            gradients += count * FLOAT32
            optimizer += count * FLOAT32 * ADAMW_STATES
        if resident_pool:
            pool = resident_pool * architectures[snapshot_side].parameters() * dtype
    biggest = max(architectures.values(), key=lambda a: a.parameters())
    tokens = config.micro_batch * config.max_model_len
    rank, adapted = (int(config.lora.get("r", 8)), lora_targets(config.lora)) if config.lora else (0, ())
    frozen = bool(config.lora)
    padded = config.micro_batch > 1  # one sample has no padding: transformers passes no mask
    layer = biggest.layer_activation_bytes(dtype, frozen=frozen, lora_rank=rank, lora_targets=adapted, padded=padded)
    if config.gradient_checkpointing:  # each layer's input, and one layer recomputed at a time
        activations = tokens * (biggest.checkpointed_bytes(dtype, frozen=frozen) + layer)
    else:
        activations = tokens * biggest.layers * layer
    activations += tokens * biggest.outside_layers_activation_bytes(dtype, frozen=frozen)
    if config.lora and float(config.lora.get("lora_dropout", 0.0)) > 0:
        shapes = biggest.linear_shapes()
        dropped = sum(shapes[name][0] for name in lora_targets(config.lora))  # each adapter's dropped input copy
        activations += tokens * dtype * dropped * (1 if config.gradient_checkpointing else biggest.layers)
    positions = min(config.logprob_chunk or config.max_model_len, config.max_model_len)
    logits = config.micro_batch * positions * biggest.vocab_size * (dtype + 3 * FLOAT32)
    mask = 0
    if padded:  # the boolean mask, and SDPA's `dtype` copy of it that each attention call keeps
        kept_copies = 1 if config.gradient_checkpointing else biggest.layers
        mask = config.micro_batch * config.max_model_len**2 * (1 + dtype * kept_copies)
    if config.generation_engine == "vllm":
        generation = int(config.vllm_gpu_memory_utilization * config.gpu_memory_gb * GB)
    else:
        prompts_tokens = config.generation_batch * config.max_model_len
        prefill = prompts_tokens * dtype * (biggest.hidden_size + 3 * biggest.intermediate_size)
        prefill_mask = config.generation_batch * config.max_model_len**2 * (1 + dtype)  # and one converted copy
        generation = prompts_tokens * biggest.kv_bytes_per_token(dtype) + prefill + prefill_mask
    if config.gpus > 1:
        notes.append(f"the trainer is one process on one device: {config.gpus - 1} of {config.gpus} GPUs stay idle")
    samples = template_samples(config)
    if samples.startswith("up to"):
        notes.append(f"the chat template re-renders earlier turns: {samples} training samples per episode")
    return Plan(
        config,
        architectures,
        weights,
        gradients,
        optimizer,
        pool,
        activations,
        logits,
        mask,
        generation,
        notes,
        samples,
    )


def template_samples(config: TrainConfig) -> str:
    """The training samples of one episode of the trained side: "1" when its chat template
    extends each prompt with the next turn, "up to N" (the env's `max_turns`) when it re-renders
    earlier turns; when the tokenizer cannot be read (not in the local cache: only its config is
    known offline), the two bounds, which the memory terms do not depend on."""
    from baselines.training.traces import template_rerenders
    from scope_envs.core.registration import find_env

    def most() -> str:
        try:  # the env's own limit; building it may need data or extras that planning does not
            return str(find_env(config.env).make(**config.env_kwargs).max_turns)
        except (OSError, ImportError) as error:
            return f"the env's max_turns (not read: {type(error).__name__})"

    try:
        tokenizer = _tokenizer(config.policy)
    except (OSError, ValueError, KeyError):
        return (
            f"1, or up to {most()} if its chat template re-renders earlier turns (the tokenizer is not "
            "available offline to tell; memory is the same either way)"
        )
    if getattr(tokenizer, "chat_template", None) is None:
        return "unknown (the tokenizer has no chat template)"
    if not template_rerenders(tokenizer):
        return "1"
    return f"up to {most()}"


def _tokenizer(spec: str) -> Any:
    backend, argument = split_spec(spec)
    if backend == "tiny":
        from sims.testing import tiny_chat_model

        return tiny_chat_model(0)[1]
    from transformers import AutoTokenizer

    if backend == "smollm2":
        from sims.hf_backend import smollm2_path

        return AutoTokenizer.from_pretrained(smollm2_path())
    if backend == "hf" and argument:
        return AutoTokenizer.from_pretrained(argument, local_files_only=True)
    raise ValueError(f"no tokenizer for {spec!r}")


# the settings that shrink a run, in the order a user would reach for them: (key, new value)
def _remedies(config: TrainConfig) -> list[tuple[str, Any]]:
    remedies: list[tuple[str, Any]] = []
    if config.dtype == "float32":
        remedies.append(("dtype", "bfloat16"))
    if not config.lora:
        remedies.append(("lora", STANDARD_LORA))
    if not config.gradient_checkpointing:
        remedies.append(("gradient_checkpointing", True))
    if config.logprob_chunk == 0 or config.logprob_chunk > 512:
        remedies.append(("logprob_chunk", 512))
    if config.generation_engine == "vllm" and config.vllm_gpu_memory_utilization > 0.3:
        remedies.append(("vllm_gpu_memory_utilization", 0.3))
    if config.generation_engine != "vllm" and config.generation_batch > 8:
        remedies.append(("generation_batch", max(config.generation_batch // 4, 8)))
    if config.micro_batch > 1:
        remedies.append(("micro_batch", max(config.micro_batch // 4, 1)))
    return remedies


def hints(config: TrainConfig) -> list[str]:
    """`key: value` settings that, applied together in this order, make the run fit (the fewest
    of the list that do), or all of them and a bigger GPU when even that is not enough."""
    chosen: list[str] = []
    current = config
    for key, value in _remedies(config):
        current = dataclasses.replace(current, **{key: value}).validate()
        chosen.append(f"{key}: {_flow(value)}")
        if plan(current).fits:
            return chosen
    return [*chosen, "a GPU with more memory"]


def _flow(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000)
    return text.strip().removesuffix("...").strip()


def format_plan(result: Plan, device: str = "") -> str:
    """The plan as `scope plan` prints it; `device`: where the GPU's memory comes from, when not the config."""
    config = result.config

    def row(label: str, value: int, detail: str = "") -> str:
        return f"  {label:<12} {value / GB:8.2f} GB" + (f"  ({detail})" if detail else "")

    models = ", ".join(
        f"{side} {a.name} ({a.parameters() / 1e9:.2f}B parameters)" for side, a in result.architectures.items()
    )
    training = f"LoRA r={config.lora.get('r', 8)}" if config.lora else "full fine-tuning"
    if config.generation_engine == "vllm":
        generation = row("vLLM engine", result.generation, f"{config.vllm_gpu_memory_utilization:.0%} of the GPU")
    else:
        generation = row("KV cache", result.generation, f"{config.generation_batch} prompts, with prefill")
    lines = [
        f"plan: {config.method}; {models}",
        f"      {training}, {config.dtype}, micro_batch {config.micro_batch} x max_model_len {config.max_model_len}, "
        f"gradient_checkpointing {str(config.gradient_checkpointing).lower()}, "
        f"logprob_chunk {config.logprob_chunk or 'off'}",
        f"      sequence cap: max_model_len {config.max_model_len} tokens per sample (enforced on every generation "
        f"path); training samples per episode: {result.samples_per_episode}",
        f"device 0 of {config.gpus}, {config.gpu_memory_gb:g} GB" + (f" ({device})" if device else ""),
        row("weights", result.weights),
        row("gradients", result.gradients),
        row("optimizer", result.optimizer, "AdamW, float32"),
        row("activations", result.activations),
        row("logits", result.logits, "at their peak"),
        row("mask", result.mask, _mask_detail(config, result)),
        generation,
        row("pool", result.pool),
        row("total", result.total),
    ]
    if config.generation_engine != "vllm":
        lines.append("  (generation and training alternate: the total counts the larger of the two working sets)")
    lines += [f"  note: {note}" for note in result.notes]
    if result.fits:
        lines.append(f"verdict: fits, {result.headroom / GB:.1f} GB headroom ({result.headroom / result.capacity:.0%})")
    else:
        lines.append(f"verdict: does not fit, {-result.headroom / GB:.1f} GB over")
        lines.append("hint: set " + "; ".join(hints(config)))
    return "\n".join(lines)


def _mask_detail(config: TrainConfig, result: Plan) -> str:
    if not result.mask:
        return "none: a micro-batch of one sample is not padded"
    copies = 1 if config.gradient_checkpointing else max(a.layers for a in result.architectures.values())
    return (
        f"{config.micro_batch} x {config.max_model_len}^2, boolean, and {copies} {config.dtype} "
        f"cop{'y' if copies == 1 else 'ies'} kept by SDPA"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a YAML config file, or the name of one a benchmark ships")
    parser.add_argument("overrides", nargs="*", help="key=value settings that override the config")
    parser.add_argument(
        "--gpu-memory",
        type=float,
        metavar="GB",
        help="the memory of each GPU to plan for (default: the config's gpu_memory_gb, else this machine's GPU, "
        "else an assumed 80 GB)",
    )


def run(args: argparse.Namespace) -> int:
    from baselines.arguments import failed

    try:
        config = load_config(args.config, args.overrides)
        config, device = _sized(config, args)
        result = plan(config)
    except ValueError as error:
        return failed(args, error)
    print(format_plan(result, device))
    return 0 if result.fits else 1


def _sized(config: TrainConfig, args: argparse.Namespace) -> tuple[TrainConfig, str]:
    """The config with the GPU memory to plan for, and, when neither --gpu-memory nor the config
    gives it, where it comes from: this machine's GPU, or none found and an assumed one."""
    if args.gpu_memory is not None:
        if args.gpu_memory <= 0:
            raise ValueError(f"--gpu-memory is a GPU's memory in GB, more than 0; got {args.gpu_memory:g}")
        return dataclasses.replace(config, gpu_memory_gb=args.gpu_memory).validate(), ""
    if _names_gpu_memory(args):
        return config, ""
    gpu = local_gpu()
    if gpu is None:  # the config's default, TrainConfig.gpu_memory_gb: 80 GB
        assumed = f"an assumed {config.gpu_memory_gb:g} GB GPU, such as an A100 or H100 80GB"
        return config, f"no GPU found on this machine: the fit is for {assumed}; --gpu-memory GB plans for yours"
    name, memory = gpu
    return dataclasses.replace(config, gpu_memory_gb=round(memory, 1)), f"this machine's {name}"


def _names_gpu_memory(args: argparse.Namespace) -> bool:
    """Whether the config file or an override sets gpu_memory_gb."""
    import yaml

    if any(item.partition("=")[0].strip() == "gpu_memory_gb" for item in args.overrides):
        return True
    with find_config(args.config).open() as file:
        values = yaml.safe_load(file)
    return isinstance(values, dict) and "gpu_memory_gb" in values


def local_gpu() -> tuple[str, float] | None:
    """The name and memory (GB) of this machine's first GPU; None without one, or without torch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    properties = torch.cuda.get_device_properties(0)
    return properties.name, properties.total_memory / GB
