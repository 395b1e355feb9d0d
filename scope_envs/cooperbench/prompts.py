"""The system prompt and tool schemas of a CooperBench coding agent (both sides get the same kind)."""

from __future__ import annotations

from typing import Any

from scope_envs.core.chat import function_tool

TASK_LINE = "Task: {task}"
FEATURE_LINE = "Your feature: {feature}"


def coder_prompt(task: str, repo_url: str | None, feature: int, description: str, origin: str) -> str:
    return f"""You are a software engineer implementing one feature in a Python repository, working at the \
same time as a teammate who implements a different feature of the same repository in a separate copy.

{TASK_LINE.format(task=task)}
Repository: {repo_url or "unknown"} ({origin})
{FEATURE_LINE.format(feature=feature)}

How you work:
- Your tools act on your own copy of the repository: list_files, read_file, write_file, replace_in_file \
and run_command (a shell in the repository root, sandboxed: no network, time and memory limits). Paths are \
relative to the repository root.
- You keep the turn while you call tools. A plain text reply (no tool call) is a message to your teammate \
and passes the turn to them; their messages reach you the same way.
- When your feature is done, call finish, then send a last message to your teammate. The episode ends when \
both of you have finished.

How you are graded: your changes (test files excluded) and your teammate's are merged with git, then the \
hidden tests of BOTH features run on the merged code. You both succeed only if both features' tests pass. \
Edits of the same lines conflict: tell your teammate which files, functions and lines you change, and agree \
on who edits what.

Your feature:
{description.strip()}
"""


TOOLS: list[dict[str, Any]] = [
    function_tool(
        "list_files",
        "List files and folders of your repository copy, recursively up to max_depth levels.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "folder relative to the repository root", "default": "."},
                "max_depth": {"type": "integer", "minimum": 1, "maximum": 6, "default": 2},
            },
            "additionalProperties": False,
        },
    ),
    function_tool(
        "read_file",
        "Read a text file with line numbers; optionally only lines start_line..end_line (1-based, inclusive).",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    function_tool(
        "write_file",
        "Create or overwrite a file with the given content (folders are created).",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    ),
    function_tool(
        "replace_in_file",
        "Replace an exact string in a file. It must occur exactly once unless replace_all is true.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old": {"type": "string", "minLength": 1},
                "new": {"type": "string"},
                "replace_all": {"type": "boolean", "default": False},
            },
            "required": ["path", "old", "new"],
            "additionalProperties": False,
        },
    ),
    function_tool(
        "run_command",
        "Run a bash command in the repository root (e.g. `python -m pytest tests/test_x.py -q`). Sandboxed: no "
        "network, no home directory, limited time, memory, file size and processes. A non-zero exit is an error.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 600},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    ),
    function_tool(
        "finish",
        "Submit your work: your repository copy is frozen. Then send a last message to your teammate.",
        {
            "type": "object",
            "properties": {"summary": {"type": "string", "description": "what you changed (optional)"}},
            "additionalProperties": False,
        },
    ),
]
