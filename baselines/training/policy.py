"""Trainable policies: what the trainer needs from a model.

`generate(prompts, seeds)` samples continuations of token-id prompts with their log-probs;
`sequence_logprobs(samples)` recomputes, differentiably, the log-probs (and entropies) of the
tokens of training samples; `trainable_parameters()` are what its optimizer updates;
`freeze_reference()` / `reference_logprobs(samples)` give the initial policy of a KL penalty.
`LMPolicy` provides them for a transformers causal LM (full fine-tuning or LoRA through peft); any
other policy with the same methods (such as the linear policies over discrete acts of
`baselines.training.act_policy`) trains with the same code.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from baselines.training.packing import attention_mask_for, can_pack, pack
from baselines.training.traces import SideTrace
from scope_envs.core.policy import ContextFull, Reply
from scope_envs.core.rollout import Sample
from scope_envs.core.specs import split_spec
from sims.hf_backend import HFSimulator, smollm2_path

LANGUAGE_MODELS = ("tiny", "smollm2", "hf")


class TrainablePolicy(Protocol):
    def generate(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Reply]: ...

    def sequence_logprobs(self, samples: Sequence[Sample]) -> tuple[Any, Any, Any]: ...

    def trainable_parameters(self) -> list[Any]: ...

    def freeze_reference(self) -> None: ...

    def reference_logprobs(self, samples: Sequence[Sample]) -> Any: ...


class LMPolicy:
    """A causal LM being trained. Generation goes through `HFSimulator.generate` (the same
    sampling code the simulators use), so rollout log-probs and training log-probs agree.

    Precision: frozen weights and compute in `dtype`; the trained parameters (the whole model, or
    the LoRA adapters) stay float32, the master weights an optimizer step at a small learning rate
    needs (in bfloat16, an update of 1e-6 to a weight of 0.02 rounds to nothing). With LoRA several
    policies can share one frozen base, each with its own adapter (`with_adapter`), and the
    initial policy is the base with adapters disabled, never a copy.
    """

    def __init__(
        self,
        simulator: HFSimulator,
        *,
        lora: dict[str, Any] | None = None,
        dtype: str = "float32",
        gradient_checkpointing: bool = False,
        logprob_chunk: int = 0,
        generation_batch: int = 32,
        adapter: str = "default",
        max_model_len: int | None = None,
        pack_samples: bool = True,
    ) -> None:
        import torch

        self.simulator = simulator
        self.pack_samples = pack_samples
        self.tokenizer = simulator.tokenizer
        self.temperature = simulator.temperature
        self.dtype = getattr(torch, dtype)
        self.logprob_chunk = logprob_chunk
        self.generation_batch = generation_batch
        self.max_model_len = max_model_len
        self.adapter = adapter
        self.lora = lora
        if lora and not hasattr(simulator.model, "peft_config"):
            from peft import LoraConfig, get_peft_model

            simulator.model.to(self.dtype)  # the frozen base
            simulator.model = get_peft_model(
                simulator.model, LoraConfig(task_type="CAUSAL_LM", **lora), adapter_name=adapter
            )
        elif not lora:
            simulator.model.float()  # master weights; compute is autocast to `dtype`
        self.model = simulator.model
        self._keep_trained_float32()
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.engine: Any = None  # a VLLMGeneration handle when generation runs on vLLM
        self._reference: Any = None  # full fine-tuning with a KL penalty: a frozen copy of the initial weights

    @property
    def is_lora(self) -> bool:
        return hasattr(self.model, "peft_config")

    @property
    def stop_ids(self) -> set[int]:
        return self.simulator.stop_ids

    def with_adapter(self, name: str) -> LMPolicy:
        """Another policy on this one's frozen base: a new LoRA adapter `name`, initialised as
        peft initialises adapters (the same function as the base), trained on its own."""
        from peft import LoraConfig

        if not self.is_lora:
            raise ValueError("only LoRA policies share a base; set lora to co-train two adapters of one model")
        other = self._sibling(name, LoraConfig(task_type="CAUSAL_LM", **self.lora))
        other._keep_trained_float32()
        return other

    def _sibling(self, name: str, adapter_config: Any) -> LMPolicy:
        """A policy sharing this one's model, tokenizer and settings, on a new adapter `name`
        (no generation engine, no KL reference of its own)."""
        self.model.add_adapter(name, adapter_config)
        other = LMPolicy.__new__(LMPolicy)
        other.__dict__.update(self.__dict__)
        other.adapter, other.engine, other._reference = name, None, None
        return other

    def trainable_parameters(self) -> list[Any]:
        """The parameters this policy trains: its own adapter's, or the whole model's."""
        if not self.is_lora:
            return [p for p in self.model.parameters() if p.requires_grad]
        marker = f".{self.adapter}."
        return [p for name, p in self.model.named_parameters() if "lora_" in name and marker in name]

    def _keep_trained_float32(self) -> None:
        import torch

        for parameter in self.trainable_parameters():
            parameter.data = parameter.data.to(torch.float32)
            parameter.requires_grad_(True)

    @contextmanager
    def active(self) -> Iterator[None]:
        """This policy's adapter active, and compute in `dtype`, for the duration."""
        import torch

        if self.is_lora and self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter)
        device = next(self.model.parameters()).device
        if self.dtype == torch.float32:
            yield
        else:
            with torch.autocast(device_type=device.type, dtype=self.dtype):
                yield

    def start_trace(self) -> SideTrace:
        """An empty token-in, token-out record of one side of one episode (rollouts call it)."""
        return SideTrace(self.tokenizer, self.stop_ids)

    def generate(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Reply | ContextFull]:
        """A reply per prompt, its prompt and tokens within `max_model_len` whichever engine
        samples it (a turn is cut to fit); a prompt that leaves no room gets `ContextFull`, which
        ends its episode as `max_model_len`."""
        budgets = turn_budgets(prompts, self.simulator.max_new_tokens, self.max_model_len)
        room = [i for i, budget in enumerate(budgets) if budget > 0]
        generated: list[Reply] = []
        if room and self.engine is not None:
            generated = self.engine.generate(
                [prompts[i] for i in room], [seeds[i] for i in room], [budgets[i] for i in room]
            )
        elif room:
            self.model.eval()
            with self.active():
                for start in range(0, len(room), self.generation_batch):
                    chunk = room[start : start + self.generation_batch]
                    generated.extend(
                        self.simulator.generate(
                            [prompts[i] for i in chunk], [seeds[i] for i in chunk], [budgets[i] for i in chunk]
                        )
                    )
        replies: list[Reply | ContextFull] = [
            ContextFull(f"the prompt has {len(prompt)} tokens, max_model_len {self.max_model_len}")
            for prompt in prompts
        ]
        for index, reply in zip(room, generated, strict=True):
            replies[index] = reply
        return replies

    def sequence_logprobs(self, samples: Sequence[Sample]) -> tuple[Any, Any, Any]:
        """`[batch, tokens-1]` log-probs of each next token under softmax(logits / temperature),
        the matching loss mask, and the entropies (no gradient); right-padded, 0 where the mask is.
        Only the positions that predict a trained token go through the output head: the
        vocabulary-sized logits of a prompt, or of the other side's turns, are never computed.
        With `logprob_chunk`, they exist for that many trained positions at a time, and are
        recomputed in the backward pass rather than kept. With `pack_samples`, samples that share
        their first prompt (a GRPO group's) are read as one row, the shared part once
        (`baselines.training.packing`)."""
        import torch

        # training follows: the rollout's cached conversations are about to be stale, and their
        # memory is better spent on the backward pass
        self.simulator.clear_prefix_cache()
        device = next(self.model.parameters()).device
        width = max(len(s.ids) for s in samples)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([s.ids + [pad] * (width - len(s.ids)) for s in samples], device=device)
        attention = torch.tensor([[1] * len(s.ids) + [0] * (width - len(s.ids)) for s in samples], device=device)
        mask = torch.tensor([s.mask + [0] * (width - len(s.ids)) for s in samples], device=device)[:, 1:]
        rows, columns = mask.nonzero(as_tuple=True)  # position t predicts token t + 1
        targets = ids[:, 1:][rows, columns]
        pieces = []
        with self.active():
            # use_cache=False: the training forward never builds a KV cache (transformers would,
            # without gradient checkpointing, for the whole batch)
            decoder = self.model.get_decoder()
            if self.pack_samples and can_pack(self.model):
                packed = pack(samples, rows, columns, pad, device)
                hidden = decoder(
                    input_ids=packed.ids,
                    attention_mask=attention_mask_for(self.model, packed.attend, torch.float32),
                    position_ids=packed.positions,
                    use_cache=False,
                )
                picked = hidden.last_hidden_state[packed.predictors]
            else:
                hidden = decoder(input_ids=ids, attention_mask=attention, use_cache=False)
                picked = hidden.last_hidden_state[rows, columns]
            head = self.model.get_output_embeddings()
            chunk = self.logprob_chunk or max(len(targets), 1)
            for start in range(0, len(targets), chunk):
                part = slice(start, start + chunk)
                if self.logprob_chunk:
                    from torch.utils.checkpoint import checkpoint

                    # the head runs inside the checkpoint: no chunk's logits outlive its own computation
                    pieces.append(
                        checkpoint(
                            lambda h, t: self._token_logprobs(self._logits(head, h), t),
                            picked[part],
                            targets[part],
                            use_reentrant=False,
                        )
                    )
                else:
                    pieces.append(self._token_logprobs(self._logits(head, picked[part]), targets[part]))
        zeros = torch.zeros(len(samples), width - 1, device=device)
        if not pieces:
            return zeros, mask, zeros.clone()
        logprobs = zeros.index_put((rows, columns), torch.cat([p[0] for p in pieces]).to(zeros.dtype))
        entropy = zeros.index_put((rows, columns), torch.cat([p[1] for p in pieces]).to(zeros.dtype))
        return logprobs, mask, entropy

    def _logits(self, head: Any, hidden: Any) -> Any:
        """The output head, with the final soft cap of models that have one (as their forward applies it)."""
        logits = head(hidden)
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        return logits if not cap else cap * (logits / cap).tanh()

    def _token_logprobs(self, logits: Any, targets: Any) -> tuple[Any, Any]:
        """Log-probs of `targets` under softmax(logits / temperature), in float32, and the entropies."""
        import torch

        logp_all = torch.log_softmax(logits.float() / max(self.temperature, 1e-6), dim=-1)
        chosen = logp_all.gather(-1, targets[..., None]).squeeze(-1)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        return chosen, entropy

    def freeze_reference(self) -> None:
        """Keeps the initial policy for a KL penalty: nothing to keep with LoRA (the base with
        adapters disabled is the initial policy), else a frozen copy in `dtype`."""
        if not self.is_lora:
            self._reference = copy.deepcopy(self.model).to(self.dtype).eval().requires_grad_(False)

    def reference_logprobs(self, samples: Sequence[Sample]) -> Any:
        """Log-probs of the samples' tokens under the initial policy (see `freeze_reference`)."""
        import torch

        with torch.no_grad():
            if self.is_lora:
                with self.model.disable_adapter():
                    return self.sequence_logprobs(samples)[0]
            if self._reference is None:
                raise RuntimeError("no reference: call freeze_reference() before training")
            live = self.model
            self.model = self._reference
            try:
                return self.sequence_logprobs(samples)[0]
            finally:
                self.model = live

    def save(self, directory: Path) -> None:
        """The trained weights (this policy's adapter alone, at the top of `directory`, as peft lays
        out a single adapter) and the tokenizer."""
        if self.is_lora:
            from peft import get_peft_model_state_dict
            from safetensors.torch import save_file

            directory = Path(directory)
            directory.mkdir(parents=True, exist_ok=True)
            state = get_peft_model_state_dict(self.model, adapter_name=self.adapter)
            save_file({k: v.detach().contiguous() for k, v in state.items()}, directory / "adapter_model.safetensors")
            self.model.peft_config[self.adapter].save_pretrained(directory)
        else:
            self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def load_weights(self, directory: Path) -> None:
        """Loads weights saved by `save` into this policy (full model or this policy's adapter)."""
        import torch
        from safetensors.torch import load_file

        state: dict[str, torch.Tensor] = {}
        for file in sorted(Path(directory).glob("*.safetensors")):
            state.update(load_file(str(file)))
        if self.is_lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, state, adapter_name=self.adapter)
            self._keep_trained_float32()
        else:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
            if real_missing or unexpected:
                raise RuntimeError(
                    f"checkpoint at {directory} does not match the model: "
                    f"missing {real_missing}, unexpected {unexpected}"
                )

    def freeze_for_generation(self) -> LMPolicy:
        """This policy as a generation-only copy (a full-fine-tuning pool snapshot): its weights in
        `dtype`, without gradients, as `scope plan` counts it."""
        self.model.to(self.dtype).requires_grad_(False).eval()
        return self

    def snapshot(self, directory: Path, name: str) -> AdapterSnapshot:
        """A frozen earlier version of this policy, saved in `directory`, as a policy that
        generates with it: an extra adapter on the same resident base (LoRA only)."""
        return AdapterSnapshot(self, directory, name)


class AdapterSnapshot:
    """A saved adapter loaded beside the live ones on their shared base, for generation only
    (population co-training's pool members); `close` unloads it."""

    def __init__(self, live: LMPolicy, directory: Path, name: str) -> None:
        self.live = live
        self.name = name
        self.policy = live._sibling(name, live.model.peft_config[live.adapter])
        self.policy.load_weights(directory)
        for parameter in self.policy.trainable_parameters():
            parameter.requires_grad_(False)

    def start_trace(self) -> SideTrace:
        return self.policy.start_trace()

    def generate(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Reply]:
        try:
            return self.policy.generate(prompts, seeds)
        finally:
            self.live.model.set_adapter(self.live.adapter)  # set_adapter also sets which adapter trains

    def close(self) -> None:
        if self.name in self.live.model.peft_config:
            self.live.model.delete_adapter(self.name)
        self.live.model.set_adapter(self.live.adapter)


def build_policy(
    spec: str,
    *,
    temperature: float,
    max_new_tokens: int,
    device: str | None,
    lora: dict[str, Any] | None,
    seed: int,
    env: Any = None,
    side: str = "agent",
    dtype: str = "float32",
    gradient_checkpointing: bool = False,
    logprob_chunk: int = 0,
    generation_batch: int = 32,
    max_model_len: int | None = None,
    pack_samples: bool = True,
) -> Any:
    """A language model: `tiny` (a random model for tests), `smollm2`, `hf:MODEL_OR_PATH`; otherwise
    a linear act policy for envs with discrete acts: `linear`, or the spec of a linear policy to
    start from (see `baselines.training.act_policy`). See `LMPolicy` for the precision and memory settings."""
    backend, argument = split_spec(spec)
    if backend not in LANGUAGE_MODELS:
        from baselines.training.act_policy import build_act_policy

        return build_act_policy(spec, env=env, side=side, temperature=temperature)
    kwargs: dict[str, Any] = {"temperature": temperature, "max_new_tokens": max_new_tokens, "device": device}
    if backend == "tiny":
        from sims.testing import tiny_chat_model

        model, tokenizer = tiny_chat_model(seed)
        simulator = HFSimulator(model, tokenizer=tokenizer, name="tiny", **kwargs)
    elif backend == "smollm2":
        simulator = HFSimulator(smollm2_path(), name="smollm2-135m-instruct", **kwargs)
    elif argument:
        # a LoRA base is loaded straight in `dtype`; fully trained weights in float32 (master weights)
        simulator = HFSimulator(argument, dtype=dtype if lora else "float32", **kwargs)
    else:
        raise ValueError(f"policy {spec!r} names no model: use 'hf:MODEL_OR_PATH'")
    return LMPolicy(
        simulator,
        lora=lora,
        dtype=dtype,
        gradient_checkpointing=gradient_checkpointing,
        logprob_chunk=logprob_chunk,
        generation_batch=generation_batch,
        adapter=side,
        max_model_len=max_model_len,
        pack_samples=pack_samples,
    )


def turn_budgets(prompts: Sequence[Sequence[int]], max_new_tokens: int, max_model_len: int | None) -> list[int]:
    """How many tokens each prompt's turn may generate: `max_new_tokens`, cut so that the prompt
    and its turn fit in `max_model_len` (0: no room, the context is full)."""
    if max_model_len is None:
        return [max_new_tokens] * len(prompts)
    return [max(min(max_new_tokens, max_model_len - len(prompt)), 0) for prompt in prompts]


def language_model_of(spec: str) -> str | None:
    """The Hugging Face model id or path an `hf:` policy spec names, or None for other specs."""
    backend, argument = split_spec(spec)
    return argument if backend == "hf" and argument else None
