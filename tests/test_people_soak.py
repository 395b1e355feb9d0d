"""A soak test of a study (slow: `pytest -m slow tests/test_people_soak.py`, a few minutes).

24 simulated participants play a real `scope serve --study` process at once, with random pauses,
oversized and hostile requests between their turns, against a scripted, a slow and a failing
opponent, while the server is killed with SIGKILL twice and started again over the same
database. At the end every turn and every answer the server accepted (answered 200) is in the
database exactly once, nothing it did not accept and no participant was told about is there
twice, every participant has finished, and the server's resident memory stayed bounded.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml
from people_helpers import free_port, p4g_corpus, scope_process

PARTICIPANTS = 24
MEMORY_LIMIT_MB = 1500
TASKS = ["20180527-123001_539_live", "20180527-210026_713_live"]


def study_file(folder: Path) -> Path:
    path = folder / "soak.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "soak",
                "env": "P4G",
                "side": "agent",
                "env_kwargs": {"persona_source": str(p4g_corpus()), "exchanges": 2},
                "conditions": [
                    {"name": "scripted", "opponent": "scripted"},
                    {"name": "slow", "opponent": "scripted:people_helpers:BriefSlowPersuadee"},
                    {"name": "failing", "opponent": "scripted:people_helpers:FailingPersuadee"},
                ],
                "scenarios": TASKS,
                "episodes_per_participant": 2,
                "participants": PARTICIPANTS,
                "questionnaire": [
                    {"id": "natural", "question": "How natural?", "scale": [1, 5]},
                    {"id": "comments", "question": "Anything else?"},
                ],
            }
        )
    )
    return path


class Server:
    """The `scope serve --study` process, restarted on the same port and database."""

    def __init__(self, study: Path, db: Path) -> None:
        self.args = ("serve", "--study", str(study), "--study-db", str(db), "--env", "P4G")
        self.starts: list[float] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.peak_mb = 0.0
        self.start()

    def start(self) -> None:
        began = time.monotonic()
        self.process = scope_process(*self.args, port=self.port, timeout=300)
        self.starts.append(time.monotonic() - began)
        self.links = {}
        while len(self.links) < PARTICIPANTS:
            line = self.process.stdout.readline()
            assert line, "the server printed no links"
            if "/study?participant=" in line:
                pid = line.split("participant=")[1].split("&")[0]
                self.links[pid] = line.split("token=")[1].strip()
        threading.Thread(target=self.process.stdout.read, daemon=True).start()  # keep its pipe drained

    def sample_memory(self) -> None:
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return
        rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0)
        self.peak_mb = max(self.peak_mb, rss / 1024)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


class Participant(threading.Thread):
    def __init__(self, pid: str, token: str, url: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.token, self.url = pid, token, url
        self.rng = random.Random(seed)
        self.accepted: list[str] = []  # turns answered 200
        self.uncertain: list[str] = []  # turns whose answer was lost with the server
        self.answers: dict | None = None
        self.problems: list[str] = []

    def call(self, method: str, path: str, **kwargs) -> httpx.Response | None:
        headers = {"X-Token": self.token, **kwargs.pop("headers", {})}
        try:
            return httpx.request(
                method, f"{self.url}/api/study/{self.pid}{path}", headers=headers, timeout=60, **kwargs
            )
        except httpx.TransportError:
            time.sleep(0.5)  # the server is down: come back later
            return None

    def hostile(self) -> None:
        kind = self.rng.choice(["huge", "long", "surrogate", "foreign-token", "script", "answers-early"])
        if kind == "huge":
            response = self.call("POST", "/say", content=b'{"text": "' + b"x" * 300_000 + b'"}')
            expected = {413}
        elif kind == "long":
            response = self.call("POST", "/say", json={"text": "y" * 5000})
            expected = {422}
        elif kind == "surrogate":
            body = b'{"name": "t", "arguments": {"a": "\\udc80"}}'
            response = self.call("POST", "/tool", content=body, headers={"Content-Type": "application/json"})
            expected = {422}
        elif kind == "foreign-token":
            response = self.call("GET", "", headers={"X-Token": "jeton-é".encode()})
            expected = {403}
        elif kind == "script":
            response = self.call("GET", "", headers={"Origin": "http://attacker.example"})
            expected = {403}
        else:
            response = self.call("POST", "/answers", json={"answers": {"natural": 999, "comments": ""}})
            expected = {409, 422}
        if response is not None and response.status_code not in expected:
            self.problems.append(f"{kind}: {response.status_code} {response.text[:200]}")

    def run(self) -> None:
        deadline = time.monotonic() + 1200
        view = None
        while view is None and time.monotonic() < deadline:
            response = self.call("POST", "/consent")
            view = response.json() if response is not None and response.status_code == 200 else None
        turn = 0
        while time.monotonic() < deadline:
            time.sleep(self.rng.uniform(0, 0.4))
            if self.rng.random() < 0.3:
                self.hostile()
            response = self.call("GET", "")
            if response is None:
                continue
            view = response.json()
            if not view.get("current"):
                break
            if not view["current"]["state"]["your_turn"]:
                self.problems.append(f"stuck: {view['current']}")
                return
            text = f"{self.pid} says {turn}: would you give <b>a little</b>?"
            turn += 1
            response = self.call("POST", "/say", json={"text": text})
            if response is None:
                self.uncertain.append(text)
            elif response.status_code == 200:
                self.accepted.append(text)
            elif response.status_code not in {409, 503}:
                self.problems.append(f"say: {response.status_code} {response.text[:200]}")
        else:
            self.problems.append("did not finish its conversations in time")
            return
        answers = {"natural": self.rng.randint(1, 5), "comments": f"fine, from {self.pid}"}
        while time.monotonic() < deadline:
            response = self.call("POST", "/answers", json={"answers": answers})
            if response is None:
                continue
            if response.status_code == 200:
                self.answers = answers
            elif response.status_code != 409:
                self.problems.append(f"answers: {response.status_code} {response.text[:200]}")
            break
        again = self.call("POST", "/answers", json={"answers": {"natural": 1, "comments": "changed"}})
        if again is not None and again.status_code != 409:
            self.problems.append(f"a second submission got {again.status_code}")


@pytest.mark.slow
def test_a_study_survives_many_participants_hostile_inputs_and_two_kills(tmp_path):
    db = tmp_path / "soak.sqlite"
    server = Server(study_file(tmp_path), db)
    people = [Participant(pid, token, server.url, seed) for seed, (pid, token) in enumerate(server.links.items())]
    try:
        for person in people:
            person.start()
        for kill in range(2):
            until = time.monotonic() + 8 + 4 * kill
            while time.monotonic() < until:
                server.sample_memory()
                time.sleep(0.5)
            server.kill()
            time.sleep(1)
            server.start()
        while any(person.is_alive() for person in people):
            server.sample_memory()
            time.sleep(0.5)
    finally:
        server.process.terminate()
        server.process.wait(timeout=30)

    problems = [f"{p.pid}: {problem}" for p in people for problem in p.problems]
    assert not problems, problems
    conn = sqlite3.connect(db)
    stored = [
        json.loads(row[0])["message"]["content"]
        for row in conn.execute("SELECT message FROM turns WHERE side = 'agent'")
    ]
    counts = Counter(stored)
    assert all(n == 1 for n in counts.values()), [t for t, n in counts.items() if n > 1][:5]
    for person in people:
        assert all(counts[text] == 1 for text in person.accepted), person.pid
        assert set(t for t in stored if t.startswith(f"{person.pid} says")) <= set(person.accepted + person.uncertain)
    rows = {row[0]: row[1:] for row in conn.execute("SELECT id, answers, finished_at FROM participants")}
    assert len(rows) == PARTICIPANTS
    for person in people:
        answers, finished = rows[person.pid]
        assert finished is not None and answers is not None, f"{person.pid} did not finish"
        if person.answers is not None:
            assert json.loads(answers) == person.answers
    statuses = Counter(row[0] for row in conn.execute("SELECT status FROM episodes"))
    assert statuses == {"done": 2 * PARTICIPANTS}
    ended = Counter(json.loads(row[0])["end_reason"] for row in conn.execute("SELECT record FROM episodes"))
    assert ended["opponent_error"] > 0  # the failing opponent was met, and its episodes ended
    assert server.peak_mb < MEMORY_LIMIT_MB, f"the server reached {server.peak_mb:.0f} MB"
    starts = ", ".join(f"{s:.0f}" for s in server.starts)
    accepted = sum(len(p.accepted) for p in people)
    print(f"soak: {accepted} turns accepted, peak RSS {server.peak_mb:.0f} MB, starts {starts} s, {ended}")
