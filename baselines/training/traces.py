"""Token-in, token-out: the exact token sequence one trainable side saw and produced in an episode.

Each of the side's turns is generated from a prompt of token ids and recorded as generated. The
next prompt extends the previous one: its generated tokens, the template's end of that message,
then the chat-template rendering of what happened since (the other side's turn, tool results) as
a delta. The model's own tokens are never re-tokenized.

A chat template that re-renders earlier turns (e.g. one that drops the reasoning of past
assistant turns) breaks this: the new rendering no longer starts with the old one. That is
detected, the next prompt is rendered afresh, and the episode is trained as one sample per turn
(each turn's exact prompt plus its tokens) instead of as one sequence, so nothing is trained on
a context the model did not see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scope_envs.core.rollout import Sample


@dataclass(frozen=True)
class Turn:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]


def render_text(
    tokenizer: Any, view: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, generation_prompt: bool
) -> str:
    return tokenizer.apply_chat_template(
        list(view), tools=list(tools) if tools else None, add_generation_prompt=generation_prompt, tokenize=False
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass
class SideTrace:
    """The turns of one side of one episode; `next_prompt` before each generation, `record` after."""

    tokenizer: Any
    stop_ids: set[int]
    turns: list[Turn] = field(default_factory=list)
    chained: bool = True  # every prompt extended the previous sequence
    _pending_prompt: list[int] | None = None
    _view_length: int = 0

    def next_prompt(self, view: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[int]:
        if not self.turns:
            prompt = encode(self.tokenizer, render_text(self.tokenizer, view, tools, True))
        else:
            prompt = self._extend(view, tools)
        self._pending_prompt = prompt
        return prompt

    def record(self, token_ids: Sequence[int], logprobs: Sequence[float], view_length_after: int) -> None:
        """Stores the turn generated from the last prompt; `view_length_after` is the length of the
        side's view once the env recorded this turn (the point the next delta starts from)."""
        if self._pending_prompt is None:
            raise RuntimeError("record() without next_prompt()")
        if len(token_ids) != len(logprobs):
            raise ValueError("one log-prob per generated token")
        self.turns.append(Turn(self._pending_prompt, list(token_ids), list(logprobs)))
        self._pending_prompt = None
        self._view_length = view_length_after

    def _extend(self, view: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[int]:
        before = render_text(self.tokenizer, view[: self._view_length], tools, False)
        now = render_text(self.tokenizer, view, tools, True)
        if not now.startswith(before):
            self.chained = False  # the template re-rendered an earlier turn
            return encode(self.tokenizer, now)
        last = self.turns[-1]
        sequence = last.prompt_ids + last.token_ids
        if not last.token_ids or last.token_ids[-1] not in self.stop_ids:
            sequence = [*sequence, self._end_of_turn_id()]  # a turn cut at max tokens, closed as the template closes it
        return sequence + encode(self.tokenizer, self._after_end_of_turn(before) + now[len(before) :])

    def _end_of_turn_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        return eos if eos in self.stop_ids else min(self.stop_ids)

    def _after_end_of_turn(self, rendered: str) -> str:
        """What the template writes after a message's end-of-turn token (e.g. the newline after <|im_end|>)."""
        marker = self.tokenizer.decode([self._end_of_turn_id()])
        cut = rendered.rfind(marker)
        return rendered[cut + len(marker) :] if cut >= 0 else ""

    def samples(self) -> list[Sample]:
        """One sequence for the whole episode when every prompt extended the last; else one per turn."""
        if not self.turns:
            return []
        if self.chained:
            ids = list(self.turns[0].prompt_ids)
            mask = [0] * len(ids)
            logprobs = [0.0] * len(ids)
            for index, turn in enumerate(self.turns):
                if index > 0:
                    glue = turn.prompt_ids[len(ids) :]
                    assert turn.prompt_ids[: len(ids)] == ids, "a chained prompt extends the sequence"
                    ids += glue
                    mask += [0] * len(glue)
                    logprobs += [0.0] * len(glue)
                ids += turn.token_ids
                mask += [1] * len(turn.token_ids)
                logprobs += turn.logprobs
            samples = [Sample(ids, mask, logprobs, len(self.turns[0].prompt_ids))]
        else:
            samples = [
                Sample(
                    t.prompt_ids + t.token_ids,
                    [0] * len(t.prompt_ids) + [1] * len(t.token_ids),
                    [0.0] * len(t.prompt_ids) + t.logprobs,
                    len(t.prompt_ids),
                )
                for t in self.turns
            ]
        samples = [s for s in samples if any(s.mask)]
        for sample in samples:
            sample.check()
        return samples


def template_rerenders(tokenizer: Any) -> bool:
    """Whether `tokenizer`'s chat template re-renders an earlier turn once the conversation goes
    on (so `SideTrace` trains an episode as one sample per turn), tried on a short conversation."""
    view = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": "Tell me more."},
    ]
    before = render_text(tokenizer, view[:3], None, False)
    return not render_text(tokenizer, view, None, True).startswith(before)
