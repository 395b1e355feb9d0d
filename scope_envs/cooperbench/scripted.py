"""A scripted CooperBench coder that applies its feature's gold patch through the env's own tools.

It reads its task and feature from its system prompt, finds the gold patch in the dataset
(`data_dir`, else `$SCOPE_COOPERBENCH_DATA` or the cache), and turns each hunk into a
`replace_in_file` call (new files: `write_file`; deleted files: `run_command rm`). Then it calls
`finish` and tells its teammate what it changed. Stateless: the number of edit calls already in
its view says where it is.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.cooperbench.dataset import DatasetNotFoundError, load_task, locate_dataset
from scope_envs.cooperbench.patches import filter_test_files, parse_hunks, split_patch
from scope_envs.core.chat import Message, ToolCall
from scope_envs.core.policy import PolicyError
from scope_envs.core.scripted import ScriptedSimulator

EDIT_TOOLS = frozenset({"write_file", "replace_in_file", "run_command"})
TASK = re.compile(r"^Task: (\S+)$", re.MULTILINE)
FEATURE = re.compile(r"^Your feature: (\d+)$", re.MULTILINE)


def gold_edits(patch: str) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls that turn the base into base + `patch` (test files left out)."""
    edits: list[tuple[str, dict[str, Any]]] = []
    for section in split_patch(filter_test_files(patch)):
        if section.new is None:
            edits.append(("run_command", {"command": f"rm -f -- {shlex.quote(str(section.old))}"}))
            continue
        hunks = parse_hunks(section)
        if section.old is None:
            content = "".join(line for hunk in hunks for line in hunk.new)
            edits.append(("write_file", {"path": section.new, "content": content}))
            continue
        for hunk in hunks:
            edits.append(("replace_in_file", {"path": section.new, "old": "".join(hunk.old), "new": "".join(hunk.new)}))
    return edits


class GoldPatchCoder(ScriptedSimulator):
    """Applies the gold patch in batches of `batch` edits, calls finish, then reports and waits."""

    name = "gold-patch-coder"

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, batch: int = 8) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.batch = batch

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str | Message:
        prompt = self.system_prompt(messages)
        task_match, feature_match = TASK.search(prompt), FEATURE.search(prompt)
        if not task_match or not feature_match:
            return "I cannot tell which task and feature are mine."
        feature = int(feature_match[1])
        try:
            task = load_task(self.data_dir or locate_dataset(download=False), task_match[1])
        except (DatasetNotFoundError, ValueError) as error:
            raise PolicyError(
                f"GoldPatchCoder needs the dataset (data_dir= or $SCOPE_COOPERBENCH_DATA): {error}"
            ) from None
        edits = gold_edits(task.features[feature].patch)
        calls = [call for m in messages if m.role == "assistant" for call in m.tool_calls]
        done = sum(call.name in EDIT_TOOLS for call in calls)
        if done < len(edits):
            batch = edits[done : done + self.batch]
            return Message("assistant", None, tool_calls=tuple(ToolCall.create(n, a) for n, a in batch))
        if not any(call.name == "finish" for call in calls):
            return Message("assistant", None, tool_calls=(ToolCall.create("finish", {"summary": "gold patch"}),))
        if len(self.said(messages)) == 0:
            files = sorted({args["path"] for name, args in edits if "path" in args})
            return f"I implemented feature {feature}; I changed {', '.join(files) or 'nothing'}. I have finished."
        return "I have finished; nothing more from me."
