"""Retrying API calls: exponential backoff with full jitter, honouring `retry-after`."""

from __future__ import annotations

import email.utils
import random
import re
import time
from dataclasses import dataclass
from typing import Any

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
AUTHENTICATION_STATUS = frozenset({401, 402, 403})  # the key is wrong, lacks access, or has no credit
# the request's shape is refused (unknown model or endpoint, an option the model does not take),
# unless the server says it is about this one conversation (see `about_one_conversation`)
CONFIGURATION_STATUS = frozenset({400, 404, 405, 415, 422})
_ONE_CONVERSATION = re.compile(
    r"context[ _]length|context window|prompt is too long|too many (input )?tokens|content[ _-]?(filter|policy)"
    r"|safety system|flagged",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. Delay before retry `n` (0-based) is uniform in
    `[0, min(max_delay, initial_delay * multiplier**n)]` (full jitter), unless the server said
    how long to wait (`retry-after-ms` / `retry-after`), which is then honoured up to `max_delay`."""

    max_attempts: int = 6
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        ceiling = min(self.max_delay, self.initial_delay * self.multiplier**attempt)
        return (rng or random).uniform(0.0, ceiling)


def about_one_conversation(server_message: str) -> bool:
    """True when a refused request was refused for its conversation (too long, filtered), so other
    conversations may still pass: that episode fails, the run goes on."""
    return bool(_ONE_CONVERSATION.search(server_message))


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date), if present."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return None if parsed is None else max(0.0, parsed.timestamp() - time.time())


class RetryableError(Exception):
    """A failure worth retrying: timeout, connection error, 429, 5xx, or a malformed response."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
