import json
import subprocess
import sys

from baselines.cli import main


def test_envs_lists_registered_environments(helpdesk_ids, capsys):
    assert main(["envs"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "TestHelpdesk" in line)
    assert (
        line.startswith("scope/TestHelpdesk-v0")
        and "order-support test env" in line
        and "scope/TestHelpdesk-User-v0" in line
    )


def test_play_prints_transcripts_and_json(helpdesk_ids, capsys):
    assert main(["play", "TestHelpdesk", "--episodes", "2", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        out.count("=== episode") == 2
        and "agent: Hi! How can I help you today?" in out
        and "terminated: user_stop" in out
    )
    assert main(["play", "scope/TestHelpdesk-v0", "--task-id", "cancel-1003", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["scenario_id"] == "cancel-1003" and record["rewards"] == {"agent": 1.0, "user": 1.0}


def test_play_p4g_with_env_args(capsys):
    args = ["play", "P4G", "--json", "--env-arg", "persona_source=synthetic", "--env-arg", "exchanges=1"]
    assert main(args) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["end_reason"] == "max_turns" and record["turns"] == 2


def test_unknown_env_is_a_clear_error(capsys):
    assert main(["play", "Nope"]) == 2
    assert "scope envs" in capsys.readouterr().err


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "baselines.cli", "envs"], capture_output=True, text=True, check=True)
    assert result.returncode == 0


def test_diagnose_takes_sim_args_beside_a_scripted_simulator_and_says_why_it_has_no_vs_row(tmp_path, capsys):
    arguments = ["diagnose", "--env", "P4G", "--env-arg", "persona_source=synthetic", "--simulator", "scripted"]
    arguments += ["--vs", "--sim-arg", "temperature=0.5", "--states", "2", "--samples", "2", "--embedding", "tfidf"]
    assert main([*arguments, "--plot", str(tmp_path / "c.png"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "--vs: not for scripted: a rule-based simulator cannot write a list of candidate replies" in out
    assert [json.loads(line)["name"] for line in out.splitlines() if line.startswith("{")] == ["scripted"]


def test_play_documents_its_options_and_names_who_plays_each_side(helpdesk_ids, capsys):
    try:
        main(["play", "--help"])
    except SystemExit:
        pass
    shown = " ".join(capsys.readouterr().out.split())
    for option, words in (
        ("--episodes EPISODES", "how many episodes"),
        ("--seed SEED", "the first episode's seed"),
        ("--task-id TASK_ID", "play this task"),
        ("--split SPLIT", "draw tasks from this split"),
    ):
        assert f"{option} {words}" in shown, option
    assert main(["play", "P4G", "--env-arg", "persona_source=synthetic", "--env-arg", "exchanges=1"]) == 0
    assert "(agent: scripted-persuader  user: scripted-persuadee) ===" in capsys.readouterr().out
