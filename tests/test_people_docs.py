"""The people pages as written: every YAML block loads, the study file of study.md is a valid
study, its commands run on it, and a broken study file is one line naming the file and line."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from people_helpers import REPO, free_port, p4g_corpus, wait_for_port

from baselines.apps.people.study import StudyConfig
from baselines.cli import main

DOCS = sorted((REPO / "docs" / "people").glob("*.md"))
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)


def blocks(language: str) -> list[tuple[str, str]]:
    return [(path.name, body) for path in DOCS for lang, body in BLOCK.findall(path.read_text()) if lang == language]


@pytest.mark.parametrize(("page", "text"), blocks("yaml"))
def test_every_yaml_block_of_the_people_docs_loads(page, text):
    assert isinstance(yaml.safe_load(text), dict), page


def study_block() -> str:
    (text,) = [text for page, text in blocks("yaml") if page == "study.md"]
    return text


def test_the_documented_study_file_is_a_valid_study_and_its_commands_run(tmp_path):
    corpus = p4g_corpus()
    study = StudyConfig.model_validate(yaml.safe_load(study_block()))
    assert len(study.participant_ids()) == 20 and [q.scale for q in study.questionnaire] == [(1, 5), None]
    (tmp_path / "pilot.yaml").write_text(study_block())
    port = free_port()
    env = {**os.environ, "SCOPE_P4G_DATA": str(corpus), "PYTHONPATH": str(REPO)}
    # the page's commands, as written (plus a free port)
    server = subprocess.Popen(
        [sys.executable, "-m", "baselines.cli", "serve", "--study", "pilot.yaml", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_port(port, process=server)
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert output.count("/study?participant=") == 20 and "synthetic" not in output
    assert (tmp_path / "pilot.sqlite").is_file()
    exported = subprocess.run(
        [sys.executable, "-m", "baselines.cli", "study", "export", "pilot.sqlite", "--out", "results.csv"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "results.csv").read_text().count("\n") == 41  # a header and 20 x 2 episodes


def test_a_broken_study_file_is_one_line_naming_the_file_and_line(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text(study_block().replace('question: "How natural was your partner?"', "question: How: [natural"))
    assert main(["serve", "--study", str(broken)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"{broken}:" in error and "not valid YAML" in error
    line = int(error.split(f"{broken}:")[1].split(":")[0])
    assert "How: [natural" in broken.read_text().splitlines()[line - 1] or line == len(broken.read_text().splitlines())
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(study_block().replace("episodes_per_participant: 2", "episodes_per_participant: lots"))
    assert main(["serve", "--study", str(wrong)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "episodes_per_participant" in error


def test_serve_says_when_an_env_falls_back_and_leaves_code_running_envs_out(no_corpus):
    from baselines.apps.people.api_models import ServerSettings
    from baselines.apps.people.commands import check_envs

    settings = ServerSettings()
    notes = check_envs(settings)
    assert any("synthetic personas" in note and "SCOPE_P4G_DATA" in note for note in notes)
    assert "CooperBench" not in settings.envs and "P4G" in settings.envs


def test_a_named_env_whose_data_is_missing_is_refused_at_startup(tmp_path, monkeypatch):
    from baselines.apps.people.api_models import ServerSettings
    from baselines.apps.people.commands import check_envs

    monkeypatch.delenv("SCOPE_COOPERBENCH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = ServerSettings(envs=["CooperBench"], env_kwargs={"CooperBench": {"download": False}})
    with pytest.raises(ValueError, match="CooperBench cannot be built"):
        check_envs(settings)
