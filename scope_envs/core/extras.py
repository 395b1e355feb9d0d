"""What to install when an optional dependency is missing: this project's distribution and its extras.

Every missing-dependency message is built here, so that each names the same distribution (the one
this repository installs) and the extra that provides what is missing. The command also works in
a checkout installed with `pip install -e .`: pip then adds the extra's packages to it.
"""

from __future__ import annotations

DISTRIBUTION = "scope-envs"


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message, one line, says what installs it."""


def install_command(extra: str) -> str:
    """`pip install "scope-envs[hf]"` for `extra="hf"`."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def needs_extra(what: str, packages: str, extra: str) -> str:
    """One line: `"<what> needs <packages>, from the 'hf' extra: pip install "scope-envs[hf]""`."""
    return f"{what} needs {packages}, from the '{extra}' extra: {install_command(extra)}"


# The extra that provides each optional top-level module, for a `ModuleNotFoundError` raised deep
# in a command (torch is in `demo` too, but every command past `scope demo` that needs it needs `hf`).
EXTRA_OF_MODULE = {
    "torch": "hf",
    "transformers": "hf",
    "accelerate": "hf",
    "peft": "hf",
    "gguf": "hf",
    "safetensors": "hf",
    "openai": "api",
    "anthropic": "api",
    "vllm": "vllm",
    "ray": "ray",
    "scipy": "evaluate",
    "openpyxl": "calibrate",
    "fastapi": "web",
    "uvicorn": "web",
    "datasets": "web",
    "yaml": "web",
}


def missing_module_hint(what: str, error: ModuleNotFoundError) -> str | None:
    """One line naming the extra that provides the module `error` names; None for a module no
    extra provides (a real bug, which should keep its traceback)."""
    module = (error.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    return needs_extra(what, f"the '{module}' package", extra) if extra else None
