"""Generation of a trained policy with vLLM on GPUs, in step with the trainer.

The trained model is a LoRA adapter on a base model. vLLM samples the policy's turns from their
token-id prompts (token-in, token-out), with the log-prob of each sampled token; after every
update the trainer saves the new adapter and it is served under a new name (vLLM caches adapters
by name, so reusing one could serve stale weights). The trainer corrects for the numerical gap
between vLLM's and its own log-probs with truncated importance sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sims.base import Reply
from sims.vllm_backend import reply_from_output, vllm_available


class VLLMGeneration:
    def __init__(
        self,
        base_model: str,
        *,
        adapter_dir: Path,
        temperature: float,
        max_new_tokens: int,
        max_lora_rank: int = 64,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        usable, why = vllm_available()
        if not usable:
            raise ImportError(f"generation_engine 'vllm': {why}; use generation_engine: transformers")
        from vllm import LLM

        self.engine = LLM(model=base_model, enable_lora=True, max_lora_rank=max_lora_rank, **(engine_kwargs or {}))
        self.tokenizer = self.engine.get_tokenizer()
        self.adapter_dir = adapter_dir
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.version = 0
        self.lora: Any = None

    def sync(self, model: Any) -> str:
        """Saves the trained adapter and serves it from now on; returns its (new) name."""
        from vllm.lora.request import LoRARequest

        self.version += 1
        path = self.adapter_dir / f"v{self.version:06d}"
        model.save_pretrained(path)
        name = f"policy-v{self.version}"
        self.lora = LoRARequest(name, self.version, str(path))
        return name

    def generate(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Reply]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(temperature=self.temperature, max_tokens=self.max_new_tokens, seed=seed, logprobs=0)
            for seed in seeds
        ]
        outputs = self.engine.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, lora_request=self.lora, use_tqdm=False
        )
        return [reply_from_output(output, engine="vllm", adapter=self.version) for output in outputs]
