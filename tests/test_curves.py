import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from baselines.cli import main
from baselines.training.curves import plot_curves


def test_a_nearly_flat_entropy_is_labelled_with_plain_numbers(tmp_path, monkeypatch):
    """A run whose entropy moves in the fifth decimal (a tiny random model) once had its axis
    labelled `1e-5+5.862`: the labels are plain numbers, and both axes say what they measure."""
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)
    history = [
        {"step": s, "reward_mean": 0.0, "entropy": 5.86201 + 1e-5 * s, "heldout_success": 0.0} for s in range(1, 5)
    ]
    assert plot_curves(history, tmp_path) == [tmp_path / "curves.png"]
    (figure,) = drawn
    figure.canvas.draw()
    assert [axis.yaxis.get_offset_text().get_text() for axis in figure.axes] == ["", ""]
    assert all(axis.get_ylabel() for axis in figure.axes)
    plt.close("all")


def test_the_tiny_run_says_what_it_shows(tmp_path, capsys):
    out = tmp_path / "run"
    small = ["steps=1", "eval_every=1", "eval_tasks=1", "groups_per_step=1", "group_size=2", "max_new_tokens=4"]
    assert main(["train", "p4g_tiny", *small, f"output_dir={out}"]) == 0
    shown = capsys.readouterr().out
    assert "what this run shows: a check of the whole pipeline" in shown and "cannot learn" in shown
