"""Dialogue rules: how a benchmark's turns must be written, for policies that write turns in
another form.

Verbalized Sampling, for one, asks a simulator for several candidate replies in a JSON list instead
of one reply; each candidate must still follow the benchmark's own conventions (its stop token, the
marker that states a final answer). A benchmark declares those conventions as `ReplyRule`s when it
is registered; a policy finds the ones that apply to a conversation from the system prompt of its
view (`scope_envs.core.registration.reply_rules_for`), so it needs no knowledge of any benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplyRule:
    """`rule` holds for every reply of a side whose system prompt contains `applies_when`
    (compared case-insensitively): e.g. the stop token a benchmark's prompt tells the side to use."""

    applies_when: str
    rule: str

    def applies_to(self, system_prompt: str) -> bool:
        return self.applies_when.lower() in system_prompt.lower()
