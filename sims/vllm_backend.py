"""vLLM on GPUs, with LoRA adapters, in two forms:

* `vllm:MODEL` (`VLLMSimulator`): batched generation with the offline engine (`LLM.chat`); an
  asynchronous rollout hands it the requests waiting together, one batch at a time;
* `vllm-async:MODEL` (`AsyncVLLMSimulator`): the asynchronous engine (`AsyncLLMEngine`) with
  continuous batching: each request joins the running batch as soon as it is made and returns as
  soon as its own sequence ends, so an asynchronous rollout's episodes never wait for each other.

Both need the `vllm` package and a CUDA device; where either is missing, building one raises an
`ImportError` that says so (the tests skip). Like `hf`, every reply carries its token ids and
their sampling log-probabilities, and each request is seeded on its own.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

from scope_envs.core.extras import needs_extra
from scope_envs.core.policy import Reply, Simulator, Tools, View, as_messages, batch_arguments
from sims.background_loop import BackgroundLoop
from sims.hf_backend import generated_reply, render_prompt


def vllm_available() -> tuple[bool, str]:
    """(usable, why not) for this machine."""
    try:
        import torch
    except ImportError:
        return False, needs_extra("vllm:MODEL", "torch", "vllm")
    if not torch.cuda.is_available():
        return False, "vLLM needs a CUDA device and none is visible"
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False, needs_extra("vllm:MODEL", "the 'vllm' package", "vllm")
    return True, ""


class ServedByVLLM(Simulator):
    """What both forms share: sampling settings, the engine's arguments and LoRA adapters.
    `load_adapter(path)` switches to a LoRA adapter under a new name (vLLM caches adapters by
    name, so reusing one could serve stale weights)."""

    spec_backend = "vllm"

    def __init__(
        self,
        model: str,
        *,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        enable_lora: bool = False,
        max_lora_rank: int = 64,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        usable, why = vllm_available()
        if not usable:
            raise ImportError(f"{self.spec_backend}:{model}: {why}")
        self.name = model
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        # log-probs after temperature, as the trainer computes them (vLLM's default is before it)
        self.engine_args = {
            "model": model,
            "enable_lora": enable_lora,
            "max_lora_rank": max_lora_rank,
            "logprobs_mode": "processed_logprobs",
        }
        self.engine_args.update(engine_kwargs or {})
        self.lora: Any = None
        self._adapter_ids = itertools.count(1)
        self.deterministic = True  # given a seed

    def load_adapter(self, path: str, name: str | None = None) -> str:
        """Serves the LoRA adapter at `path` from now on; returns the (new, unique) adapter name."""
        from vllm.lora.request import LoRARequest

        adapter_id = next(self._adapter_ids)
        adapter_name = name or f"adapter-{adapter_id}"
        self.lora = LoRARequest(adapter_name, adapter_id, path)
        return adapter_name

    def sampling_params(self, seed: int | None) -> Any:
        """One request's sampling, seeded on its own, with the log-prob of each sampled token."""
        from vllm import SamplingParams

        return SamplingParams(
            temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens, seed=seed, logprobs=0
        )


class VLLMSimulator(ServedByVLLM):
    """A model served by an in-process offline vLLM engine (`vllm:MODEL`)."""

    def __init__(self, model: str, **settings: Any) -> None:
        super().__init__(model, **settings)
        from vllm import LLM

        self.engine = LLM(**self.engine_args)

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return self.respond_batch([messages], [tools], seeds=[seed])[0]

    def respond_batch(
        self, batch: Sequence[View], tools: Sequence[Tools] | None = None, *, seeds: Sequence[int | None] | None = None
    ) -> list[Reply]:
        tool_list, seed_list = batch_arguments(batch, tools, seeds)
        replies: list[Reply | None] = [None] * len(batch)
        groups: dict[str, list[int]] = {}
        for index, tool_set in enumerate(tool_list):  # one engine call per distinct tool list
            groups.setdefault(json.dumps(tool_set or [], sort_keys=True), []).append(index)
        for key, indices in groups.items():
            conversations = [[m.to_openai() for m in as_messages(batch[i])] for i in indices]
            params = [self.sampling_params(seed_list[i]) for i in indices]
            outputs = self.engine.chat(
                conversations, params, lora_request=self.lora, tools=json.loads(key) or None, use_tqdm=False
            )
            for i, output in zip(indices, outputs):
                replies[i] = reply_from_output(output, model=self.name)
        return [r for r in replies if r is not None]


class AsyncVLLMSimulator(ServedByVLLM):
    """A model served by vLLM's asynchronous engine (`vllm-async:MODEL`), with continuous batching
    (see the module docstring). The engine lives on a background event loop of its own, started
    with the first request, so callers on any thread or loop share it; prompts are rendered with
    the model's own chat template (`transformers`), as the trainer renders them."""

    spec_backend = "vllm-async"

    def __init__(self, model: str, **settings: Any) -> None:
        super().__init__(model, **settings)
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.engine: Any = None
        self._request_ids = itertools.count()
        self._background = BackgroundLoop(f"vllm-async-{model}", setup=self._start_engine)

    def _start_engine(self) -> None:
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        self.engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**self.engine_args))

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return self._background.submit(lambda: self._generate(messages, tools, seed)).result()

    async def arespond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return await self._background.wait(lambda: self._generate(messages, tools, seed))

    async def _generate(self, messages: View, tools: Tools, seed: int | None) -> Reply:
        prompt = {"prompt_token_ids": render_prompt(self.tokenizer, messages, tools, name=self.name)}
        request = f"scope-{next(self._request_ids)}"
        final = None
        async for output in self.engine.generate(prompt, self.sampling_params(seed), request, lora_request=self.lora):
            final = output
        if final is None:
            raise RuntimeError(f"vllm-async:{self.name}: the engine returned no output")
        return reply_from_output(final, model=self.name)

    def close(self) -> None:
        """Shuts the engine down on its own loop (its output task and sockets live there)."""
        engine, self.engine = self.engine, None

        async def shutdown() -> None:
            if engine is not None and hasattr(engine, "shutdown"):
                engine.shutdown()

        self._background.close(shutdown if self._background.running else None)


def reply_from_output(output: Any, **metadata: Any) -> Reply:
    """A reply from one vLLM request output: its text, and its token ids with their sampling
    log-probs (both left out when the engine did not return a log-prob for every token)."""
    completion = output.outputs[0]
    token_ids = list(completion.token_ids)
    logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs or [], token_ids)]
    complete = len(logprobs) == len(token_ids)
    metadata = {
        "prompt_ids": list(output.prompt_token_ids or []),
        "finish_reason": completion.finish_reason,
        **metadata,
    }
    return generated_reply(completion.text, token_ids if complete else None, logprobs if complete else None, metadata)


def make_vllm(model: str, **kwargs: Any) -> VLLMSimulator:
    return VLLMSimulator(model, **kwargs)


def make_async_vllm(model: str, **kwargs: Any) -> AsyncVLLMSimulator:
    return AsyncVLLMSimulator(model, **kwargs)
