"""`scope play ENV --human SIDE` driven through a pseudo-terminal, as a person types."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

from people_helpers import P4G_PERSONAS, REPO

from baselines.training.records import read_records


class Terminal:
    """A process attached to a pseudo-terminal; `expect` waits for a pattern in what it printed."""

    def __init__(self, *args: str) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "baselines.cli", *args],
            cwd=REPO,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
            close_fds=True,
        )
        os.close(slave)
        self.output = ""

    def expect(self, pattern: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.output):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {pattern!r} in:\n{self.output[-3000:]}")
            ready, _, _ = select.select([self.master], [], [], min(remaining, 0.5))
            if ready:
                try:
                    self.output += os.read(self.master, 65536).decode(errors="replace").replace("\r\n", "\n")
                except OSError:  # the process closed the terminal
                    if self.process.poll() is not None and not re.search(pattern, self.output):
                        raise AssertionError(f"exited without {pattern!r}:\n{self.output[-3000:]}") from None
        return self.output

    def type(self, line: str) -> None:
        self.mark = len(self.output)
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        try:
            return self.process.wait(timeout=30)
        finally:
            os.close(self.master)


def test_a_person_plays_the_p4g_persuader_to_the_end(tmp_path):
    save = tmp_path / "episodes.jsonl"
    term = Terminal(
        "play",
        "P4G",
        "--human",
        "agent",
        "--opponent",
        "scripted",
        "--save",
        str(save),
        "--env-arg",
        f"persona_source={P4G_PERSONAS}",
        "--env-arg",
        "exchanges=2",
    )
    term.expect(r"You play the agent of P4G")
    term.expect(r"\n> $")
    term.type("/tools")
    term.expect(r"no tools on this side")
    for _ in range(2):
        term.type("Hi! Would you give part of your payment to Save the Children?")
        term.expect(r"\[user\] .+\n(> |=== ended)")
    term.expect(r"=== ended: \w+ after \d+ turns ===")
    term.expect(r"you: reward [\d.]+ +components \{.*'donation'")
    term.expect(r"episode saved to")
    assert term.close() == 0
    (record,) = read_records(save)
    assert record.players == {"agent": "human", "user": "scripted"} and record.turns == 4
    assert record.log[0]["message"]["content"].startswith("Hi! Would you give")


def test_a_tau2_tool_call_is_asked_argument_by_argument_and_checked_before_sending(tmp_path):
    save = tmp_path / "episodes.jsonl"
    term = Terminal("play", "Tau2Retail", "--human", "agent", "--task-id", "0", "--save", str(save))
    term.expect(r"\[user\] .+\n> $")
    term.type("/tools")
    term.expect(r"find_user_id_by_email\(email\*: string\)")
    term.type('/call find_user_id_by_email {"email": 3}')
    term.expect(r"! find_user_id_by_email: .*not of type 'string'")
    term.type("/call find_user_id_by_email")
    term.expect(r"email \(string, required\): $")
    term.type("nobody@example.com")
    term.expect(
        r"\[you: tool call\] find_user_id_by_email\(\{\"email\": \"nobody@example.com\"\}\)\n"
        r"\[tool result for you\] Error: .*\n> $"
    )
    term.type("/quit")
    term.expect(r"you left before the end")
    assert term.close() == 0
    (record,) = read_records(save)
    assert record.end_reason == "unfinished"
    calls = [e for e in record.log if e["message"].get("tool_calls")]
    assert len(calls) == 1  # the call refused by the schema check never reached the env
