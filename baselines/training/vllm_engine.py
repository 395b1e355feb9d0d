"""Generation of a trained policy with vLLM on GPUs, in step with the trainer.

The trained model is a LoRA adapter on a base model. vLLM samples the policy's turns from their
token-id prompts (token-in, token-out), with the log-prob of each sampled token; after every
update the trainer saves the new adapter and it is served under a new name (vLLM caches adapters
by name, so reusing one could serve stale weights); `ServedAdapters` keeps the folders of the
last two versions of each side and deletes older ones (at r = 32 a Qwen3-4B adapter is about
0.5 GB, one per update). The trainer corrects for the numerical gap between vLLM's and its own
log-probs with truncated importance sampling.

In co-training both models are adapters of one base model, so one engine serves both: each
trained side holds an `AdapterHandle` (the `sync` / `generate` the trainer calls) naming its
adapter, and every generation request carries its side's latest adapter.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scope_envs.core.policy import Reply
from sims.vllm_backend import reply_from_output, vllm_available


class ServedAdapters:
    """The folders adapters are served from: `root/KEY/vNNNNNN`, one per version; the newest
    `keep` of each key stay on disk (the one served now, and the one before it)."""

    def __init__(self, root: Path, keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = keep

    def folder(self, key: str, version: int) -> Path:
        return self.root / key / f"v{version:06d}"

    def prune(self, key: str) -> None:
        """Deletes all but the newest `keep` versions of `key`."""
        versions = sorted((self.root / key).glob("v[0-9]*"), key=lambda path: int(path.name[1:]))
        for stale in versions[: -self.keep]:
            shutil.rmtree(stale, ignore_errors=True)


class VLLMGeneration:
    def __init__(
        self,
        base_model: str,
        *,
        adapter_dir: Path,
        temperature: float,
        max_new_tokens: int,
        max_lora_rank: int = 64,
        gpu_memory_utilization: float = 0.4,
        max_model_len: int | None = None,
        dtype: str = "bfloat16",
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        usable, why = vllm_available()
        if not usable:
            raise ImportError(f"generation_engine 'vllm': {why}; use generation_engine: transformers")
        from vllm import LLM

        self.engine = LLM(
            model=base_model,
            enable_lora=True,
            max_lora_rank=max_lora_rank,
            max_loras=2,  # the agent's and the simulator's adapters stay loaded side by side
            gpu_memory_utilization=gpu_memory_utilization,  # the rest is for the trained models
            max_model_len=max_model_len,  # else the model's own limit (e.g. 262k), whose KV cache need not fit
            dtype=dtype,
            # log-probs after temperature, as the trainer computes them (vLLM's default is before)
            logprobs_mode="processed_logprobs",
            **(engine_kwargs or {}),
        )
        self.tokenizer = self.engine.get_tokenizer()
        self.served = ServedAdapters(adapter_dir)
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.version = 0  # one counter for all adapters: vLLM needs each (name, int id) to be new
        self.adapters: dict[str, Any] = {}

    def handle(self, key: str) -> AdapterHandle:
        return AdapterHandle(self, key)

    def sync(self, policy: Any, key: str = "policy") -> str:
        """Saves `key`'s trained adapter (`policy.save`) and serves it from now on; returns its (new) name."""
        from vllm.lora.request import LoRARequest

        self.version += 1
        path = self.served.folder(key, self.version)
        policy.save(path)
        name = f"{key}-v{self.version}"
        self.adapters[key] = LoRARequest(name, self.version, str(path))
        self.served.prune(key)
        return name

    def generate(
        self,
        prompts: list[list[int]],
        seeds: Sequence[int | None],
        budgets: Sequence[int] | None = None,
        key: str = "policy",
    ) -> list[Reply]:
        """One reply per prompt, each of at most its `budgets` entry of new tokens (default `max_new_tokens`)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        budgets = list(budgets) if budgets is not None else [self.max_new_tokens] * len(prompts)
        params = [
            SamplingParams(temperature=self.temperature, max_tokens=budget, seed=seed, logprobs=0)
            for seed, budget in zip(seeds, budgets, strict=True)
        ]
        outputs = self.engine.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, lora_request=self.adapters[key], use_tqdm=False
        )
        adapter = self.adapters[key].lora_int_id
        return [reply_from_output(output, engine="vllm", adapter=adapter) for output in outputs]


@dataclass(frozen=True)
class AdapterHandle:
    """One trained side's view of a shared engine: its own adapter, the engine's batching."""

    engine: VLLMGeneration
    key: str

    def sync(self, policy: Any) -> str:
        return self.engine.sync(policy, self.key)

    def generate(
        self, prompts: list[list[int]], seeds: Sequence[int | None], budgets: Sequence[int] | None = None
    ) -> list[Reply]:
        return self.engine.generate(prompts, seeds, budgets, self.key)
