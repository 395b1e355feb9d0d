"""Trainable policies: what the trainer needs from a model.

`generate(prompts, seeds)` samples continuations of token-id prompts with their log-probs;
`sequence_logprobs(samples)` recomputes, differentiably, the log-probs (and entropies) of the
tokens of training samples. `LMPolicy` provides both for a transformers causal LM (full
fine-tuning or LoRA through peft); any other policy with the same two methods (such as the small
categorical policies of the act-level testbed) trains with the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from baselines.traces import SideTrace
from scope_envs.core.policy import Reply
from scope_envs.core.rollout import Sample
from scope_envs.core.specs import split_spec
from sims.hf_backend import HFSimulator, smollm2_path

LANGUAGE_MODELS = ("tiny", "smollm2", "hf")


class TrainablePolicy(Protocol):
    def generate(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Reply]: ...

    def sequence_logprobs(self, samples: Sequence[Sample]) -> tuple[Any, Any, Any]: ...


class LMPolicy:
    """A causal LM being trained. Generation goes through `HFSimulator.generate` (the same
    sampling code the simulators use), so rollout log-probs and training log-probs agree."""

    def __init__(self, simulator: HFSimulator, *, lora: dict[str, Any] | None = None) -> None:
        self.simulator = simulator
        self.tokenizer = simulator.tokenizer
        self.temperature = simulator.temperature
        if lora:
            from peft import LoraConfig, get_peft_model

            simulator.model = get_peft_model(simulator.model, LoraConfig(task_type="CAUSAL_LM", **lora))
        self.model = simulator.model
        self.engine: Any = None  # a VLLMGeneration when generation runs on vLLM
        import inspect

        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters

    @property
    def stop_ids(self) -> set[int]:
        return self.simulator.stop_ids

    def start_trace(self) -> SideTrace:
        """An empty token-in, token-out record of one side of one episode (rollouts call it)."""
        return SideTrace(self.tokenizer, self.stop_ids)

    def generate(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Reply]:
        if self.engine is not None:
            return self.engine.generate(prompts, seeds)
        self.model.eval()
        return self.simulator.generate(prompts, seeds)

    def sequence_logprobs(self, samples: Sequence[Sample]) -> tuple[Any, Any, Any]:
        """`[batch, tokens-1]` log-probs of each next token under softmax(logits / temperature),
        the matching loss mask, and the entropies; right-padded."""
        import torch

        device = next(self.model.parameters()).device
        width = max(len(s.ids) for s in samples)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([s.ids + [pad] * (width - len(s.ids)) for s in samples], device=device)
        attention = torch.tensor([[1] * len(s.ids) + [0] * (width - len(s.ids)) for s in samples], device=device)
        mask = torch.tensor([s.mask + [0] * (width - len(s.ids)) for s in samples], device=device)[:, 1:]
        # Only positions that predict a trained token need logits: skip the prompt prefix all share.
        first = max(min(s.prompt_length for s in samples) - 1, 0)
        keep = {"logits_to_keep": width - first} if self._keeps_logits else {}
        logits = self.model(input_ids=ids, attention_mask=attention, **keep).logits[:, -(width - first) :]
        logp_all = torch.log_softmax(logits[:, :-1].float() / max(self.temperature, 1e-6), dim=-1)
        logprobs = torch.zeros(len(samples), width - 1, device=device)
        logprobs[:, first:] = logp_all.gather(-1, ids[:, first + 1 :, None]).squeeze(-1)
        entropy = torch.zeros(len(samples), width - 1, device=device)
        entropy[:, first:] = -(logp_all.exp() * logp_all).sum(-1).detach()
        return logprobs, mask, entropy

    def save(self, directory: Path) -> None:
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def load_weights(self, directory: Path) -> None:
        """Loads weights saved by `save` into this policy (full model or LoRA adapter)."""
        import torch
        from safetensors.torch import load_file

        files = sorted(directory.glob("*.safetensors"))
        state: dict[str, torch.Tensor] = {}
        for file in files:
            state.update(load_file(str(file)))
        if hasattr(self.model, "peft_config"):
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, state)
        else:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
            if real_missing or unexpected:
                raise RuntimeError(
                    f"checkpoint at {directory} does not match the model: "
                    f"missing {real_missing}, unexpected {unexpected}"
                )


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
) -> Any:
    """A language model: `tiny` (a random model for tests), `smollm2`, `hf:MODEL_OR_PATH`; otherwise
    a linear act policy for envs with discrete acts: `linear`, or the spec of a linear policy to
    start from (see `baselines.act_policy`)."""
    backend, argument = split_spec(spec)
    if backend not in LANGUAGE_MODELS:
        from baselines.act_policy import build_act_policy

        return build_act_policy(spec, env=env, side=side, temperature=temperature)
    kwargs = {"temperature": temperature, "max_new_tokens": max_new_tokens, "device": device}
    if backend == "tiny":
        from sims.testing import tiny_chat_model

        model, tokenizer = tiny_chat_model(seed)
        simulator = HFSimulator(model, tokenizer=tokenizer, name="tiny", **kwargs)
    elif backend == "smollm2":
        simulator = HFSimulator(smollm2_path(), name="smollm2-135m-instruct", **kwargs)
    elif argument:
        simulator = HFSimulator(argument, **kwargs)
    else:
        raise ValueError(f"policy {spec!r} names no model: use 'hf:MODEL_OR_PATH'")
    return LMPolicy(simulator, lora=lora)


def language_model_of(spec: str) -> str | None:
    """The Hugging Face model id or path an `hf:` policy spec names, or None for other specs."""
    backend, argument = split_spec(spec)
    return argument if backend == "hf" and argument else None
