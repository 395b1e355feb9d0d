"""Helpers of the people-in-the-loop tests: a persuadee that answers Verbalized Sampling's request
the way a cooperative model does, a uvicorn server on a free loopback port, a headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from local_data import P4G, data_dir, require

from scope_envs.core.scripted import ScriptedSimulator

REPO = Path(__file__).resolve().parents[1]
P4G_DATA = data_dir(P4G)
# Games play P4G on the corpus when $SCOPE_P4G_DATA names it, else on its synthetic personas: these
# tests are about the app, not the data. Studies name corpus dialogues, so theirs skip without it.
P4G_PERSONAS = str(P4G_DATA or "synthetic")
LOOPBACK = "http://127.0.0.1"  # the web app answers to loopback names only


class VerbalizingPersuadee(ScriptedSimulator):
    """Replies with five candidates when asked for several (VS), else one plain reply."""

    deterministic = True

    def reply(self, messages, tools, rng):
        if "different replies" not in messages[0].text:
            return "I am not sure yet."
        options = ["No thanks.", "Maybe later.", "Tell me more.", "Who runs it?", "I could give a little."]
        return json.dumps(
            {"responses": [{"text": t, "probability": p} for t, p in zip(options, (0.3, 0.2, 0.2, 0.2, 0.1))]}
        )


VS_OPPONENT = "vs:scripted:people_helpers:VerbalizingPersuadee"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 60.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"the server exited with {process.returncode}: {process.stdout.read() if process.stdout else ''}"
            )
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}")


class ThreadServer:
    """A uvicorn server in a thread on a free loopback port; `stop()` shuts it down."""

    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for_port(self.port)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def scope_process(*args: str, port: int, timeout: float = 180.0) -> subprocess.Popen:
    """`scope ARGS` in a subprocess (the tests folder importable), waited for until it listens
    (`scope serve` builds each offered env before it listens: slow on a loaded machine)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "baselines.cli", *args, "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_port(port, timeout=timeout, process=process)
    except BaseException:
        process.kill()  # a server that never listened is not left behind
        process.wait(timeout=30)
        raise
    return process


def chromium_driver(artifacts: Path):
    """A headless Debian Chromium driven by Selenium; skips when the system browser is missing."""
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver_path):
        if os.environ.get("SCOPE_REQUIRE_BROWSER"):  # set by .ci/run: there a missing browser is a failure
            raise RuntimeError("chromium and chromedriver are required (apt-get install chromium chromium-driver)")
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    artifacts.mkdir(parents=True, exist_ok=True)
    return webdriver.Chrome(service=Service(driver_path), options=options)


def p4g_corpus() -> Path:
    """The P4G corpus ($SCOPE_P4G_DATA), which studies need for the dialogues they name; else the test skips."""
    return require(P4G)


def one_dialogue_corpus(folder: Path) -> Path:
    """`full_info.csv` of the P4G corpus ($SCOPE_P4G_DATA) cut to one training and one test dialogue
    (both personas of each): every training episode plays the same scenario, so steps can be compared."""
    import csv

    from scope_envs.p4g.personas import split_of

    rows = list(csv.DictReader((p4g_corpus() / "full_info.csv").open(encoding="utf-8")))
    roles: dict[str, set[str]] = {}
    for row in rows:
        roles.setdefault(row["B2"], set()).add(row["B4"])
    usable = [d for d in sorted(roles) if len(roles[d]) == 2 and not d.startswith("BAD_")]
    keep = {next(d for d in usable if split_of(d) == split) for split in ("train", "test")}
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "full_info.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(row for row in rows if row["B2"] in keep)
    return folder


def artifacts_dir(tmp_path_factory) -> Path:
    """Where the browser tests keep their screenshots: $SCOPE_TEST_ARTIFACTS, else pytest's temp folder."""
    folder = Path(os.environ.get("SCOPE_TEST_ARTIFACTS") or tmp_path_factory.getbasetemp() / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def open_browser(tmp_path_factory):
    """The body of each browser module's `browser` fixture: a driver, quit at teardown."""
    driver = chromium_driver(artifacts_dir(tmp_path_factory))
    driver.artifacts = artifacts_dir(tmp_path_factory)
    yield driver
    driver.quit()


def screenshot(driver, name: str) -> Path:
    """A full-window PNG of the current page, kept as a test artifact."""
    path = driver.artifacts / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def wait_for(driver, condition, timeout: float = 90.0):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def train_tiny_run(tmp_path_factory) -> Path:
    """A real two-step training run that saves episodes: the tiny model persuades a persuadee that
    verbalizes five candidates (method vs), on a corpus of one training dialogue. Trained once per
    test session; the modules that need it share it."""
    from baselines.training.config import load_config
    from baselines.training.trainer import Trainer

    root = tmp_path_factory.getbasetemp() / "people_run"
    if (root / "run" / "metrics.jsonl").is_file():
        return root / "run"
    corpus = one_dialogue_corpus(root / "corpus")
    config = load_config(
        None,
        [
            "env=P4G",
            f"env_kwargs={{persona_source: {corpus}, exchanges: 2}}",
            "policy=tiny",
            "method=vs",
            "simulators=[scripted:people_helpers:VerbalizingPersuadee]",
            "steps=2",
            "groups_per_step=2",
            "group_size=2",
            "max_new_tokens=8",
            "eval_every=100",
            "eval_tasks=1",
            "save_episodes=3",
            f"output_dir={root / 'run'}",
            "tensorboard=false",
        ],
    )
    Trainer(config).run(progress=False)
    return root / "run"


class CountedPersuadee(ScriptedSimulator):
    """A scripted persuadee that counts how many times one was built (by the web app)."""

    built = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        CountedPersuadee.built += 1

    def reply(self, messages, tools, rng):
        return "No, thank you."


class FailingPersuadee(ScriptedSimulator):
    """A persuadee whose backend fails on its second reply, with a message that must never reach a
    browser (an upstream error quoting a key and a path)."""

    calls = 0

    def reply(self, messages, tools, rng):
        FailingPersuadee.calls += 1
        if any(m.role == "assistant" for m in messages):
            raise RuntimeError("upstream 500: key sk-SECRET rejected at /srv/models/secret.bin")
        return "Tell me more."


class SlowPersuadee(ScriptedSimulator):
    """A persuadee that takes `delay` seconds per reply, as a loaded API does."""

    delay = 3.0

    def reply(self, messages, tools, rng):
        time.sleep(self.delay)
        return "Hmm, let me think."


class BriefSlowPersuadee(SlowPersuadee):
    delay = 0.5


class CountingPersuadee(ScriptedSimulator):
    """Counts its replies across instances (a replay must not ask it again)."""

    calls = 0

    def reply(self, messages, tools, rng):
        CountingPersuadee.calls += 1
        return "Maybe."
