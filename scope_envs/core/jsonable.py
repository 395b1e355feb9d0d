"""`jsonable`: an info (or any nest of them) as plain JSON values, for loggers.

Infos keep what libraries expect (an `action_mask` is an ndarray, as PettingZoo's convention and
TorchRL want); a logger that writes JSON converts them here rather than the env degrading them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """`value` with arrays as lists, numpy scalars as Python numbers, mappings as dicts with string
    keys, tuples and sets as lists, dataclasses as dicts and objects with `to_openai` (messages)
    as their OpenAI dicts; anything else that JSON cannot hold raises `TypeError`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    if hasattr(value, "to_openai"):
        return value.to_openai()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable: {value!r:.80}")


def finite_or_null(value: Any) -> Any:
    """`value` (plain JSON values, nested) with each NaN or infinity as None: strict JSON, which
    `json.dumps(..., allow_nan=False)` writes and every reader parses."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value
