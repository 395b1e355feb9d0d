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
