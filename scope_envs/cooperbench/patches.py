"""Unified diffs: test-file filtering (as CooperBench grades), splitting by file, applying to text."""

from __future__ import annotations

import re
from dataclasses import dataclass

# CooperBench's rule: a test file an agent wrote never reaches the graded patch (it would collide
# with the hidden tests.patch), whatever the language.
TEST_DIR = re.compile(r"/(tests?|__tests__|spec|testdata)/")
TEST_FILE = re.compile(
    r"(^|/)(test_[^/]+|[^/]+_test\.[A-Za-z0-9]+|[^/]+\.(test|spec)\.[A-Za-z0-9]+|[^/]*Tests?\.(java|kt|cs|scala)|tests?\.py)$"
)
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def is_test_path(path: str) -> bool:
    return bool(TEST_DIR.search("/" + path) or TEST_FILE.search(path))


@dataclass(frozen=True)
class FilePatch:
    """The part of a patch about one file. `old`/`new` are None for a created/deleted file."""

    old: str | None
    new: str | None
    text: str

    @property
    def path(self) -> str:
        return self.new if self.new is not None else str(self.old)


def split_patch(patch: str) -> list[FilePatch]:
    """The per-file sections of a git-style patch, in order."""
    sections: list[list[str]] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git ") or not sections:
            sections.append([])
        sections[-1].append(line)
    result = []
    for lines in sections:
        text = "".join(lines)
        old = new = None
        for line in lines:
            if line.startswith("--- "):
                old = _strip(line[4:])
            elif line.startswith("+++ "):
                new = _strip(line[4:])
                break
        if old is None and new is None and lines and lines[0].startswith("diff --git "):
            match = re.match(r"diff --git a/(\S+) b/(\S+)", lines[0])
            if match:
                old, new = match[1], match[2]
        if old is None and new is None:
            continue
        result.append(FilePatch(old, new, text))
    return result


def _strip(name: str) -> str | None:
    name = name.rstrip("\n").split("\t")[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def filter_test_files(patch: str) -> str:
    """The patch without the sections that touch test files."""
    kept = [
        section.text
        for section in split_patch(patch)
        if not any(p is not None and is_test_path(p) for p in (section.old, section.new))
    ]
    text = "".join(kept)
    return text if not text or text.endswith("\n") else text + "\n"


def touched_files(patch: str) -> list[str]:
    return [section.path for section in split_patch(patch)]


class PatchError(ValueError):
    """A hunk does not match the text it is applied to."""


@dataclass(frozen=True)
class Hunk:
    """One hunk: where it starts in the old file, the old block and the new block (line lists)."""

    old_start: int
    old: tuple[str, ...]
    new: tuple[str, ...]


def parse_hunks(section: FilePatch) -> list[Hunk]:
    body = section.text.splitlines(keepends=True)
    hunks = []
    index = 0
    while index < len(body):
        match = HUNK.match(body[index])
        index += 1
        if not match:
            continue
        old_lines: list[str] = []
        new_lines: list[str] = []
        previous = " "
        while index < len(body) and not body[index].startswith(("@@", "diff --git ")):
            line = body[index]
            index += 1
            if line.startswith("\\"):  # "\ No newline at end of file": the previous line has none
                _drop_newline(old_lines, new_lines, previous)
                continue
            previous = line[:1] if line[:1] in (" ", "-", "+") else " "
            text = line[1:] if line[:1] in (" ", "-", "+") else line
            if previous in (" ", "-"):
                old_lines.append(text)
            if previous in (" ", "+"):
                new_lines.append(text)
        hunks.append(Hunk(int(match[1]), tuple(old_lines), tuple(new_lines)))
    return hunks


def apply_file_patch(original: str, section: FilePatch) -> str:
    """Applies one file's hunks to `original` (its context must match, anywhere near the stated line)."""
    lines = original.splitlines(keepends=True)
    result: list[str] = []
    position = 0
    for hunk in parse_hunks(section):
        start = max(hunk.old_start - 1, 0) if hunk.old else hunk.old_start
        at = _find(lines, list(hunk.old), start, position)
        if at is None:
            raise PatchError(f"a hunk of {section.path} does not match near line {hunk.old_start}")
        result.extend(lines[position:at])
        result.extend(hunk.new)
        position = at + len(hunk.old)
    result.extend(lines[position:])
    return "".join(result)


def _drop_newline(old_lines: list[str], new_lines: list[str], previous: str) -> None:
    targets = {" ": (old_lines, new_lines), "-": (old_lines,), "+": (new_lines,)}.get(previous, ())
    for target in targets:
        if target and target[-1].endswith("\n"):
            target[-1] = target[-1][:-1]


def _find(lines: list[str], block: list[str], start: int, floor: int) -> int | None:
    if not block:
        return min(max(start, floor), len(lines))
    size = len(block)
    for offset in range(len(lines) + 1):
        for candidate in (start + offset, start - offset):
            if floor <= candidate <= len(lines) - size and lines[candidate : candidate + size] == block:
                return candidate
    return None
