"""Training runs never lose work and fail loudly: pruning by step, one run per folder, damaged
checkpoints skipped on resume, fatal API errors and runs of failed episodes stopping with a message."""

import json
import shutil

import pytest
from llm_server import LLMServer

torch = pytest.importorskip("torch")
pytest.importorskip("openai")

from baselines.cli import main  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from baselines.training.trainer import Trainer  # noqa: E402

KEY = "sk-test-secret-0123456789"
ACTS = [  # the act-level testbed: checkpoints like a language model's, steps in milliseconds
    "env=PersuasionActs",
    "policy=linear",
    "simulators=[family:0@3]",
    "eval_simulators=[family:100]",
    "groups_per_step=2",
    "group_size=4",
    "micro_batch=64",
    "lr=0.05",
    "eval_tasks=2",
    "eval_every=100",
    "tensorboard=false",
]
RESUMABLE = [*ACTS, "steps=3", "checkpoint_every=1", "keep_checkpoints=3"]
CHAT = [  # a chat env whose user is an API simulator (the loopback server)
    "env=P4G",
    "policy=tiny",
    "groups_per_step=1",
    "group_size=2",
    "max_new_tokens=4",
    "env_kwargs={persona_source: synthetic, exchanges: 1}",
    "simulators=[openai:test-model]",
    "eval_simulators=[scripted]",
    "eval_tasks=1",
    "tensorboard=false",
]


def train(*settings):
    return main(["train", *settings])


def steps_logged(out):
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def latest(out):
    return out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()


def weights(checkpoint):
    return torch.load(checkpoint / "agent" / "policy" / "policy.pt", weights_only=True)


def stopped_with(capsys):
    """The one line `scope train` ended with (the progress bar writes to stderr too)."""
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1]


def test_pruning_orders_checkpoints_by_step_not_by_name(tmp_path):
    trainer = Trainer(load_config(None, [*ACTS, "keep_checkpoints=1", f"output_dir={tmp_path}"]))
    for step in (999_999, 1_000_000):  # "step-1000000" sorts before "step-999999" by name
        trainer.step = step
        trainer.save()
    assert latest(tmp_path).is_dir() and latest(tmp_path).name == "step-1000000"
    assert [p.name for p in (tmp_path / "checkpoints").glob("step-*")] == ["step-1000000"]


POPULATION = ["method=population", "simulator_policy=family:0@3", "pool_every=1", "pool_size=2"]


@pytest.mark.parametrize("method", ["single", "population"])
def test_a_fresh_run_never_mixes_with_another_run_in_its_folder(tmp_path, capsys, method):
    """The old bug: a shorter run pruned its own checkpoint (an older run's step 4 sorted last)."""
    settings = [*ACTS, *(POPULATION if method == "population" else []), "checkpoint_every=1", "keep_checkpoints=1"]
    assert train(*settings, "steps=4", f"output_dir={tmp_path}") == 0
    shorter = [*settings, "steps=2", f"output_dir={tmp_path}"]
    assert train(*shorter) == 1
    error = stopped_with(capsys)
    assert "another run" in error and "checkpoints up to step 4" in error and "--overwrite" in error
    assert latest(tmp_path).name == "step-000004" and steps_logged(tmp_path) == [1, 2, 3, 4]  # left as it was
    assert train(*shorter, "--overwrite") == 0
    assert [p.name for p in (tmp_path / "checkpoints").glob("step-*")] == ["step-000002"]
    assert latest(tmp_path).is_dir() and steps_logged(tmp_path) == [1, 2]
    if method == "population":  # a pool of this run's own: numbered from the start, as in a new folder
        members = json.loads((tmp_path / "sim_pool" / "pool.json").read_text())["members"]
        assert [(m["id"], m["step"]) for m in members] == [("ckpt-000001", 1), ("ckpt-000002", 2)]
    assert train(*settings, "steps=3", f"output_dir={tmp_path}", "--resume") == 0
    assert latest(tmp_path).name == "step-000003" and steps_logged(tmp_path) == [1, 2, 3]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 3-step run with a checkpoint after every step, and the weights its last one holds."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert train(*RESUMABLE, f"output_dir={out}") == 0
    return out, weights(latest(out))


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def reshape(checkpoint):
    torch.save({"weight": torch.zeros(2, 2)}, checkpoint / "agent" / "policy" / "policy.pt")


def reshape_and_resign(checkpoint):
    """Wrong shapes under a manifest that vouches for them: only loading finds the damage."""
    from baselines.training.checkpoints import write_checkpoint_manifest

    reshape(checkpoint)
    (checkpoint / "manifest.json").unlink()
    write_checkpoint_manifest(checkpoint, 3)


DAMAGE = {
    "truncated weights": lambda c: truncate(c / "agent" / "policy" / "policy.pt"),
    "truncated optimizer": lambda c: truncate(c / "agent" / "optimizer.pt"),
    "bad json": lambda c: (c / "state.json").write_text('{"step": 3, "basel'),
    "missing file": lambda c: (c / "torch_rng.pt").unlink(),
    "wrong shapes": reshape,
    "wrong shapes, re-signed": reshape_and_resign,
    "deleted": shutil.rmtree,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path, finished_run, damage):
    finished, expected = finished_run
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    DAMAGE[damage](out / "checkpoints" / "step-000003")
    with pytest.warns(UserWarning, match=r"using step-000002.*step-000003"):
        assert train(*RESUMABLE, f"output_dir={out}", "--resume") == 0
    assert latest(out).name == "step-000003" and steps_logged(out) == [1, 2, 3]
    resumed = weights(latest(out))  # step 3 replayed from step 2: exactly the lost checkpoint
    assert all(torch.equal(resumed[name], expected[name]) for name in expected)


def test_resume_skips_a_metrics_line_cut_short_by_a_crash(tmp_path, finished_run):
    out = tmp_path / "run"
    shutil.copytree(finished_run[0], out)
    with (out / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 4, "reward_me')
    assert train(*RESUMABLE, "steps=4", f"output_dir={out}", "--resume") == 0
    assert steps_logged(out) == [1, 2, 3, 4]


def test_no_intact_checkpoint_is_a_clear_error(tmp_path, finished_run, capsys):
    out = tmp_path / "run"
    shutil.copytree(finished_run[0], out)
    for step, damage in zip((1, 2, 3), ("bad json", "truncated weights", "missing file")):
        DAMAGE[damage](out / "checkpoints" / f"step-00000{step}")
    capsys.readouterr()
    assert train(*RESUMABLE, f"output_dir={out}", "--resume") == 1
    error = stopped_with(capsys)
    assert error.startswith("scope train: no intact checkpoint") and "--overwrite" in error
    for reason in ("step-000003: torch_rng.pt is missing", "step-000002: agent/policy/policy.pt has"):
        assert reason in error
    assert main(["eval", str(out / "config.yaml"), f"output_dir={out}"]) == 1


@pytest.fixture
def api_simulator(monkeypatch):
    """A loopback OpenAI-compatible server, named by the environment as a real deployment would."""
    with LLMServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield server


@pytest.mark.parametrize("status", ["401", "404"])
def test_a_rejected_key_or_unknown_model_stops_the_run_at_once(tmp_path, api_simulator, capsys, status):
    api_simulator.fail_always(status)
    assert train(*CHAT, "steps=3", f"output_dir={tmp_path}") == 1
    message = stopped_with(capsys)
    assert message.startswith(f"scope train: openai: HTTP {status}") and KEY not in message and KEY[3:] not in message
    assert len(api_simulator.requests) <= 2  # at most the first turn of each episode of the first step: no retry
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.jsonl").exists()


def test_a_step_with_too_many_failed_episodes_stops_the_run(tmp_path, api_simulator, capsys):
    api_simulator.fail_always("context")  # every simulator reply fails, each episode on its own
    settings = [*CHAT, "steps=3", f"output_dir={tmp_path}"]
    assert train(*settings) == 1
    message = stopped_with(capsys)
    assert "step 1: 2 of 2 training episodes ended in policy_error" in message
    assert "max_failed_episode_share=0.5" in message and not (tmp_path / "checkpoints").exists()
    assert train(*settings, "steps=1", "max_failed_episode_share=1.0", "--overwrite") == 0  # tolerated when asked
    (record,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert record["failed_episode_share"] == 1.0
    with pytest.raises(ValueError, match="max_failed_episode_share must be in"):
        load_config(None, ["env=P4G", "max_failed_episode_share=1.5"])


def test_evaluating_a_run_changes_nothing_in_its_folder(finished_run, tmp_path, capsys):
    finished, _ = finished_run
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    # what a run still training has on disk: a checkpoint being written, and metrics past the last checkpoint
    (out / "checkpoints" / ".step-000004.partial").mkdir()
    with (out / "metrics.jsonl").open("a") as metrics:
        metrics.write(json.dumps({"step": 4, "reward_mean": 0.0}) + "\n")
    before = sorted((p.relative_to(out), p.read_bytes() if p.is_file() else b"") for p in out.rglob("*"))
    assert main(["eval", str(out / "config.yaml"), f"output_dir={out}"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 3
    assert sorted((p.relative_to(out), p.read_bytes() if p.is_file() else b"") for p in out.rglob("*")) == before
