"""Training through verifiers without a GPU: a real transformers model behind the token-in,
token-out endpoint verifiers' train client calls, and one GRPO step on the traces it records.

verifiers 0.4 ships no optimizer (its trainer is prime-rl, which needs vLLM): what it gives a
trainer is each rollout's branches, each a token sequence (`token_ids`) with the tokens the model
sampled marked (`sampled_mask`) and the log-probs they were sampled with (`logprobs`), and the
rollout's reward from its rubric. `GenerateServer` stands in for vLLM's `/inference/v1/generate`
(and the `/v1/models` card the train client asks for the context length), sampling from the very
model object the test trains; `grpo_step` is the policy-gradient step a trainer takes on those
traces, with the project's own advantages and loss.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
import torch
from llm_server import LoopbackServer
from transformers import DynamicCache

from baselines.training.advantages import grpo
from baselines.training.loss import BatchTotals, LossConfig, policy_loss


class GenerateServer(LoopbackServer):
    """`model` served on loopback as vLLM's `/inference/v1/generate` serves one: prompt token ids
    in; sampled token ids, each with its log-prob under the sampling distribution, out. Sampling is
    seeded once per server, so a run's rollouts (played one at a time) are reproducible."""

    def __init__(self, model: Any, name: str, *, seed: int = 0, max_model_len: int = 4096) -> None:
        super().__init__()
        self.model = model
        self.name = name
        self.max_model_len = max_model_len
        self.generator = torch.Generator().manual_seed(seed)
        parameters = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"  # renamed in transformers 5
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def handle_get(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path.rstrip("/") != "/v1/models":
            return self.send_json(handler, 404, {"error": {"message": f"no route {handler.path}"}})
        card = {"id": self.name, "object": "model", "max_model_len": self.max_model_len}
        self.send_json(handler, 200, {"object": "list", "data": [card]})

    def handle_post(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if handler.path.rstrip("/") != "/inference/v1/generate":
            return self.send_json(handler, 404, {"error": {"message": f"no route {handler.path}"}})
        self.send_json(handler, 200, self.generate(body))

    @torch.no_grad()
    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        params = body.get("sampling_params") or {}
        temperature = params.get("temperature")
        temperature = 1.0 if temperature is None else float(temperature)
        if temperature <= 0:
            raise ValueError("this server samples: it needs a temperature above 0")
        stop = set(params.get("stop_token_ids") or [])
        prompt = list(body["token_ids"])
        budget = int(params.get("max_tokens") or 64)
        with self._lock:  # one generation at a time: the generator's draws stay in request order
            completion, logprobs = [], []
            cache = {self._cache_arg: DynamicCache()}
            logits = self.model(input_ids=torch.tensor([prompt]), use_cache=True, **cache).logits[0, -1]
            finish = "length"
            for _ in range(budget):
                log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
                token = int(torch.multinomial(log_probs.exp(), 1, generator=self.generator))
                completion.append(token)
                logprobs.append(float(log_probs[token]))
                if token in stop:
                    finish = "stop"
                    break
                logits = self.model(input_ids=torch.tensor([[token]]), use_cache=True, **cache).logits[0, -1]
            self.requests.append({"prompt_ids": prompt, "completion_ids": completion})
        sampled = [{"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(completion, logprobs, strict=True)]
        choice = {"index": 0, "token_ids": completion, "logprobs": {"content": sampled}, "finish_reason": finish}
        return {"request_id": f"generate-{len(self.requests)}", "choices": [choice]}


def token_logprobs(model: Any, token_ids: list[int]) -> torch.Tensor:
    """log p(token_ids[t] | token_ids[:t]) for t >= 1: the model's log-prob of each token after the first."""
    ids = torch.tensor([token_ids])
    logits = model(input_ids=ids).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]


def reply_logprob(model: Any, prompt_ids: list[int], reply_ids: list[int]) -> float:
    """log p(reply | prompt) under the model as it is now."""
    with torch.no_grad():
        return float(token_logprobs(model, prompt_ids + reply_ids)[len(prompt_ids) - 1 :].sum())


def grpo_step(
    model: Any, optimizer: Any, traces: list[Any], config: LossConfig | None = None
) -> tuple[np.ndarray, dict[str, float]]:
    """One GRPO step on a group of verifiers traces (rollouts of one task): each trace's advantage
    is its reward against the group's (mean-centred, std-scaled), given to every token verifiers
    marked sampled in the trace's trainable branches; the log-probs verifiers recorded are the old
    ones. Returns the advantages and `recorded_gap`, the largest difference on a sampled token
    between the log-prob verifiers recorded and the model's before the step (0 up to float error
    when tokens, mask and log-probs line up; the policy ratio's mean, `ratio_mean`, is then 1)."""
    config = config or LossConfig()
    advantages = grpo(np.array([trace.reward for trace in traces]))
    samples = [
        (branch, float(advantage))
        for trace, advantage in zip(traces, advantages, strict=True)
        for branch in trace.branches
        if branch.trainable
    ]
    # each sample a micro-batch, the loss divided over the whole group's tokens (gradient accumulation)
    totals = BatchTotals.of([branch.sampled_mask[1:] for branch, _ in samples])
    gap, ratio = 0.0, []
    for branch, advantage in samples:
        mask = torch.tensor(branch.sampled_mask[1:], dtype=torch.float32)[None]
        old = torch.tensor(branch.logprobs[1:], dtype=torch.float32)[None]
        logprobs = token_logprobs(model, branch.token_ids)[None]
        loss, stats = policy_loss(logprobs, old, torch.full_like(old, advantage), mask, config, totals=totals)
        loss.backward()
        gap = max(gap, float(((logprobs.detach() - old).abs() * mask).max()))
        ratio.append(stats["ratio_mean"])
    optimizer.step()
    optimizer.zero_grad()
    return advantages, {"recorded_gap": gap, "ratio_mean": float(np.mean(ratio)), "tokens": totals.tokens}


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread for the block: on the 2-core machine this was written on, its
    default two made the tiny model's warm-up about 20 times slower under pytest (103 s, not 5)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
