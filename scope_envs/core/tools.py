"""Tool-side errors and argument validation against a tool's JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any


class ToolError(Exception):
    """Raised by a tool for an error the calling side should read (e.g. 'order not found')."""


def validate_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """None when `arguments` satisfy the tool's `parameters` schema, else a readable error."""
    parameters = schema.get("function", {}).get("parameters") or {"type": "object"}
    validator = _validator(json.dumps(parameters, sort_keys=True))
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    name = schema.get("function", {}).get("name", "?")
    problems = "; ".join(_describe(error) for error in errors[:5])
    return f"invalid arguments for '{name}': {problems}"


def _describe(error: Any) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Any:
    import jsonschema  # imported on first use: environments without tools never pay for it

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)
