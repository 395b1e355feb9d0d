"""`UnicodeText`: a Gymnasium text space for dialogue.

Gymnasium's `Text` checks every character against a charset whose default (letters and digits)
rejects spaces and punctuation, so no real utterance is a member of it. This subclass keeps
`Text`'s type (vector batching, flattening checks and `isinstance` tests still apply) but
contains any string of any Unicode characters within the length bounds, and samples short
readable sentences rather than random symbols.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Dict, Text

# A small word list so that `sample()` yields utterances a dialogue env can meaningfully consume.
_SAMPLE_WORDS = (
    "hello hi thanks please yes no maybe sure sorry okay I you we they can could would will "
    "help need want like know think tell ask order book flight cancel change refund price "
    "money give charity children today tomorrow now later why how what when where which "
    "really great good bad fine not very much more less about with for from to the a an "
    "is are was be do does did have has my your our this that it and but or so because"
).split()
_SAMPLE_PUNCTUATION = (".", "?", "!", "")
_CHARSET = frozenset("".join(_SAMPLE_WORDS) + " .?!")


class UnicodeText(Text):
    """Any Unicode string with `min_length <= len(s) <= max_length` (the empty string included)."""

    def __init__(
        self, max_length: int = 1_000_000, *, min_length: int = 0, seed: int | np.random.Generator | None = None
    ) -> None:
        super().__init__(max_length=max_length, min_length=min_length, charset=_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A short sentence of common words; `mask`/`probability` are passed to `Text.sample`."""
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        n_words = int(self.np_random.integers(1, 13))
        words = [str(self.np_random.choice(_SAMPLE_WORDS)) for _ in range(n_words)]
        sentence = " ".join(words).capitalize() + str(self.np_random.choice(_SAMPLE_PUNCTUATION))
        sentence = sentence[: self.max_length]
        return sentence.ljust(self.min_length, ".")

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash((UnicodeText, self.min_length, self.max_length))


def fit_to_space(space: Any, observation: Any) -> Any:
    """`observation` made a member of `space` where text is too long for it: the end of the text is
    kept (the latest turns) after a marker saying how much was cut. Other values are returned as
    they are; `Dict` spaces are fitted entry by entry."""
    if isinstance(space, Text) and isinstance(observation, str) and len(observation) > space.max_length:
        keep = space.max_length - len(_cut_marker(len(observation)))  # the marker never gets longer than this
        if keep <= 0:
            return observation[len(observation) - space.max_length :]
        return _cut_marker(len(observation) - keep) + observation[len(observation) - keep :]
    if isinstance(space, Dict) and isinstance(observation, dict):
        return {key: fit_to_space(space.spaces.get(key), value) for key, value in observation.items()}
    return observation


def _cut_marker(cut: int) -> str:
    return f"[... {cut} earlier characters cut ...]\n"
