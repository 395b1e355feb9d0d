"""Verbalized Sampling: ask the simulator for k plausible replies with their probabilities, then
draw one. A mode-collapsed model asked for one reply gives its modal reply; asked to verbalize a
distribution, it recovers much of the diversity of its pre-alignment behaviour.

The instruction carries the rules of the conversation's benchmark that every candidate must still
follow (its stop token, how a final answer is stated): the benchmarks declare them, and they are
found from the system prompt (`scope_envs.core.rules`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.errors import UsageError
from scope_envs.core.policy import Reply, Tools, Usage, View, as_messages, batch_arguments
from scope_envs.core.registration import reply_rules_for
from sims.wrapper import SimulatorWrapper

CANDIDATES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "responses": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "probability": {"type": "number"}},
                "required": ["text", "probability"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["responses"],
    "additionalProperties": False,
}

INSTRUCTION = (
    "\n\n## How to answer\n"
    "Do not write a single reply. Instead, write {k} different replies you could plausibly give as your next message, "
    "covering the range of what you might say, and give each the probability (from 0 to 1) that you would say it. "
    "Answer with only this JSON object and nothing else:\n"
    '{{"responses": [{{"text": "<reply 1>", "probability": <p1>}}, ..., '
    '{{"text": "<reply {k}>", "probability": <p{k}>}}]}}'
)


@dataclass(frozen=True)
class Candidate:
    text: str
    probability: float | None


def vs_instruction(system_prompt: str, k: int) -> str:
    return INSTRUCTION.format(k=k) + "".join(f"\n- {rule}" for rule in reply_rules_for(system_prompt))


def parse_candidates(text: str, k: int) -> list[Candidate]:
    """Candidates from a model's answer: JSON (fenced, surrounded by text, as an object or list) or
    `<response><text>..</text><probability>..</probability></response>` blocks. Missing or
    malformed probabilities become None; empty texts are dropped; at most `k` are kept. JSON that
    does not parse (cut off, a missing brace) still yields its `"text"` fields."""
    for loader in (_from_json, _from_tags, _from_fields):
        candidates = [c for c in loader(text) if c.text.strip()]
        if candidates:
            return candidates[:k]
    return []


def _from_json(text: str) -> list[Candidate]:
    cleaned = re.sub(r"```(?:json)?", "", text)
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = cleaned.find(opener), cleaned.rfind(closer)
        if start < 0 or end <= start:
            continue
        try:
            value = json.loads(cleaned[start : end + 1])
        except (ValueError, RecursionError):
            continue
        items = value.get("responses", value.get("candidates", [])) if isinstance(value, dict) else value
        if isinstance(items, list):
            return [c for c in (_candidate(item) for item in items) if c is not None]
    return []


def _candidate(item: Any) -> Candidate | None:
    if isinstance(item, str):
        return Candidate(item, None)
    if not isinstance(item, dict):
        return None
    text = next((item[key] for key in ("text", "response", "reply", "content") if isinstance(item.get(key), str)), None)
    if text is None:
        return None
    raw = next((item[key] for key in ("probability", "prob", "p", "weight") if key in item), None)
    return Candidate(text, _probability(raw))


def _probability(raw: Any) -> float | None:
    if isinstance(raw, str):
        raw = raw.strip()
        percent = raw.endswith("%")
        try:
            value = float(raw.rstrip("%")) / (100 if percent else 1)
        except ValueError:
            return None
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    else:
        return None
    return value if np.isfinite(value) and value >= 0 else None


_TAGGED = re.compile(
    r"<response>\s*<text>(.*?)</text>\s*(?:<probability>(.*?)</probability>)?\s*</response>", re.DOTALL
)


def _from_tags(text: str) -> list[Candidate]:
    return [Candidate(body.strip(), _probability(prob) if prob else None) for body, prob in _TAGGED.findall(text)]


_TEXT_FIELD = re.compile(r'"(?:text|response|reply)"\s*:\s*"((?:[^"\\]|\\.)*)"')
_PROBABILITY_FIELD = re.compile(r'"(?:probability|prob|p)"\s*:\s*"?\s*([0-9.]+%?)')


def _from_fields(text: str) -> list[Candidate]:
    """Broken JSON (cut off, missing braces), as small models write it: each `"text": "..."`
    field is a candidate, with the first probability field that follows it, if any, before the next."""
    matches = list(_TEXT_FIELD.finditer(text))
    candidates = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        probability = _PROBABILITY_FIELD.search(text, match.end(), end)
        try:
            body = json.loads(f'"{match.group(1)}"')
        except ValueError:
            body = match.group(1)
        candidates.append(Candidate(body, _probability(probability.group(1)) if probability else None))
    return candidates


DRAWS = ("random", "prob")  # uniform over the candidates (the paper's main runs), or by their stated probabilities


def draw_index(candidates: Sequence[Candidate], draw: str, rng: np.random.Generator) -> int:
    """Uniform, or in proportion to the stated probabilities (missing ones get the mean of the rest)."""
    if draw == "random":
        return int(rng.integers(len(candidates)))
    stated = [c.probability for c in candidates if c.probability is not None]
    fill = float(np.mean(stated)) if stated else 1.0
    weights = np.array([fill if c.probability is None else c.probability for c in candidates], dtype=float)
    if weights.sum() <= 0:
        weights = np.ones(len(candidates))
    return int(rng.choice(len(candidates), p=weights / weights.sum()))


def verbalize(simulator: Any, k: int = 5, draw: str = "random") -> Any:
    """`simulator` with Verbalized Sampling drawing by `draw`: its own form where it has one
    (`simulator.verbalized(k, draw=draw)`, e.g. the act-level families), else wrapped in
    `VerbalizedSampling`."""
    if draw not in DRAWS:
        raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
    if hasattr(simulator, "verbalized"):
        return simulator.verbalized(k, draw=draw)
    return VerbalizedSampling(simulator, k=k, draw=draw)


DEFAULT_K = 5
SPEC_WRAPPER_OF_DRAW = {"random": "vs", "prob": "vsprob"}  # the spec wrapper that draws each way


def verbalize_spec(simulator: Any, k: int | None = None, *, draw: str = "random") -> Any:
    """The `vs[K]:SPEC` wrapper of the spec grammar: `verbalize(simulator, k=K or 5)`, drawing
    uniformly among the candidates."""
    if k is not None and k < 2:
        name = SPEC_WRAPPER_OF_DRAW[draw]
        raise UsageError(f"{name}{k}: Verbalized Sampling needs k >= 2 candidates ({name}:SPEC takes {DEFAULT_K})")
    return verbalize(simulator, k=DEFAULT_K if k is None else k, draw=draw)


def verbalize_prob_spec(simulator: Any, k: int | None = None) -> Any:
    """The `vsprob[K]:SPEC` wrapper: as `vs[K]:SPEC`, drawing in proportion to the probabilities
    the candidates are verbalized with (the paper's ablation)."""
    return verbalize_spec(simulator, k, draw="prob")


class VerbalizedSampling(SimulatorWrapper):
    """Wraps any simulator: each reply is drawn from k verbalized candidates, uniformly
    (`draw="random"`, the paper's main runs) or by their stated probabilities (`draw="prob"`).

    Structured output is used where the backend has it (`respond_json`); otherwise the
    instruction and a tolerant parser. Two retries, then a plain reply (`vs_fallback` in the
    metadata). The candidates, their probabilities and the drawn index go into `Reply.metadata`.
    The drawn reply is text chosen among candidates, not a sequence the model sampled, so it
    carries no token ids for training.
    """

    def __init__(self, simulator: Any, k: int = 5, draw: str = "random", retries: int = 2) -> None:
        if draw not in DRAWS:
            raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
        if k < 2:
            raise ValueError("Verbalized Sampling needs k >= 2 candidates")
        super().__init__(simulator)
        self.k = k
        self.draw = draw
        self.retries = retries
        self.name = f"vs({simulator.name}, k={k}" + (", draw=prob)" if draw == "prob" else ")")
        self.stats = {"verbalized": 0, "retried": 0, "fallback": 0}

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return self.respond_batch([messages], [tools], seeds=[seed])[0]

    def respond_batch(
        self, batch: Sequence[View], tools: Sequence[Tools] | None = None, *, seeds: Sequence[int | None] | None = None
    ) -> list[Reply]:
        """Each round asks every unresolved view at once (batched generation for local models)."""
        views = [as_messages(m) for m in batch]
        tool_list, seed_list = batch_arguments(views, tools, seeds)
        prompted = [_with_instruction(view, self.k) for view in views]
        streams = [_seeds(seed, self.retries + 2) for seed in seed_list]
        usage = [Usage() for _ in views]
        failures: list[list[str]] = [[] for _ in views]
        replies: list[Reply | None] = [None] * len(views)
        pending = list(range(len(views)))
        for attempt in range(self.retries + 1):
            if not pending:
                break
            answers = self._ask([prompted[i] for i in pending], [streams[i][attempt] for i in pending])
            still = []
            for i, answer in zip(pending, answers):
                usage[i] = usage[i] + (answer.usage or Usage())
                candidates = parse_candidates(answer.text, self.k)
                if not candidates:
                    failures[i].append(answer.text[:200])
                    still.append(i)
                    continue
                self.stats["verbalized"] += 1
                self.stats["retried"] += int(attempt > 0)
                index = draw_index(candidates, self.draw, np.random.default_rng(streams[i][-1]))
                replies[i] = Reply(
                    text=candidates[index].text,
                    usage=usage[i],
                    metadata={
                        "vs_candidates": [c.text for c in candidates],
                        "vs_probabilities": [c.probability for c in candidates],
                        "vs_index": index,
                        "vs_attempts": attempt + 1,
                        "vs_fallback": False,
                    },
                )
            pending = still
        if pending:
            plain = self.simulator.respond_batch(
                [views[i] for i in pending], [tool_list[i] for i in pending], seeds=[seed_list[i] for i in pending]
            )
            for i, reply in zip(pending, plain):
                self.stats["fallback"] += 1
                reply.metadata.update(
                    {"vs_fallback": True, "vs_attempts": self.retries + 1, "vs_failed_answers": failures[i]}
                )
                reply.usage = usage[i] + (reply.usage or Usage())
                replies[i] = reply
        return [r for r in replies if r is not None]

    def _ask(self, views: list[list[Message]], seeds: list[int | None]) -> list[Reply]:
        if getattr(self.simulator, "supports_structured_output", False):
            if hasattr(self.simulator, "respond_json_batch"):
                return self.simulator.respond_json_batch(
                    views, CANDIDATES_SCHEMA, seeds=seeds, name="verbalized_candidates"
                )
            if hasattr(self.simulator, "respond_json"):
                return [
                    self.simulator.respond_json(v, CANDIDATES_SCHEMA, seed=s, name="verbalized_candidates")
                    for v, s in zip(views, seeds)
                ]
        return self.simulator.respond_batch(views, None, seeds=seeds)


def _seeds(seed: int | None, count: int) -> list[int | None]:
    """Independent seeds for each attempt and for the draw, derived from the reply's seed."""
    if seed is None:
        return [None] * count
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(count)]


def _with_instruction(view: list[Message], k: int) -> list[Message]:
    if view and view[0].role == "system":
        system = view[0]
        return [Message("system", system.text + vs_instruction(system.text, k)), *view[1:]]
    return [Message("system", vs_instruction("", k).lstrip()), *view]
