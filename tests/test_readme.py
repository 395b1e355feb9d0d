import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert "donation" in capsys.readouterr().out


def test_readme_opens_with_the_two_commands():
    commands = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert commands[0].strip() == 'pip install -e ".[demo]" && scope demo'
    assert (
        commands[1].strip()
        == 'pip install -e ".[dev,tau2]" && ruff check . && ruff format --check . && lint-imports && pytest'
    )
    assert "ruff check . && ruff format --check . && lint-imports && pytest" in (ROOT / ".ci" / "run").read_text()


def test_the_training_quick_start_runs_in_order_without_a_refusal():
    """Each `scope train` of docs/training.md's quick start, run in order after the ones before it:
    a command that starts a different run in a folder another left a run in is refused, so each
    fresh run (no --resume, no --overwrite) differing from an earlier one has a folder of its own."""
    from baselines.training.config import dump_config, load_config

    block = re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / "training.md").read_text(), re.DOTALL)[0]
    runs: dict[str, str] = {}
    for line in block.splitlines():
        words = line.split("#")[0].split()
        if words[:2] != ["scope", "train"] or {"--resume", "--overwrite"} & set(words):
            continue
        config = load_config(words[2], words[3:])
        earlier = runs.setdefault(config.output_dir, dump_config(config))
        assert earlier == dump_config(config), f"`{' '.join(words)}` is refused: {config.output_dir} holds another run"
