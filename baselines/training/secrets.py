"""Credentials kept out of what a run saves and prints: its `config.yaml`, the config recorded in
each checkpoint and sent to the metrics loggers, and its error messages.

A config may carry a key among a simulator's or a judge's options (`api_key: sk-...` in
`env_kwargs`). The value of a key named like a credential, at any depth, and anything shaped like
one inside another string, become `REDACTED`. A saved config never needs them back: `load_config`
reads `REDACTED` as "not given", so the backend takes its key from the environment, or from the
config given when the run is resumed or evaluated.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
SECRET_KEY = re.compile(r"(^|_)(api_?key|secret|password|token|authorization)$", re.IGNORECASE)
# keys as OpenAI, Anthropic and Hugging Face issue them, and bearer credentials, inside any string
SECRET_TEXT = re.compile(r"\bsk-[A-Za-z0-9_\-]{20,}|\bhf_[A-Za-z0-9]{30,}|(?<=Bearer )\S+")


def redacted(value: Any) -> Any:
    """`value` (a config's values: mappings, lists, scalars) with every credential replaced by `REDACTED`."""
    if isinstance(value, dict):
        return {key: REDACTED if _secret(key, item) else redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    if isinstance(value, str):
        return SECRET_TEXT.sub(REDACTED, value)
    return value


def without_redacted(values: dict[str, Any]) -> dict[str, Any]:
    """`values` without the entries `redacted` replaced, at any depth: they count as not given."""
    return {
        key: without_redacted(item) if isinstance(item, dict) else item
        for key, item in values.items()
        if item != REDACTED
    }


def _secret(key: Any, value: Any) -> bool:
    return isinstance(key, str) and bool(SECRET_KEY.search(key)) and isinstance(value, str) and bool(value)
