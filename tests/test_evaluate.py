"""`scope evaluate`: cross-play cells on the act-level testbed, the cache, trained runs and pools, bad input."""

import json

import numpy as np
import pytest

pytest.importorskip("scipy")
pytest.importorskip("torch")

from baselines.apps.evaluate import (
    CellResult,
    EvalSettings,
    build_agent,
    build_simulators,
    evaluate,
    run_cells,
    summarize,
)
from baselines.apps.stats import pass_hat_k
from baselines.cli import main
from baselines.training.config import TrainConfig
from baselines.training.trainer import Trainer
from scope_envs.core.registration import find_env

ENV = "PersuasionActs"
SETTINGS = EvalSettings(ENV, tasks=12, trials=3)


def test_every_cell_is_played_on_one_task_set_and_reported(tmp_path):
    report = evaluate(SETTINGS, ["scripted", "linear"], ["family:100", "family:101@3"], tmp_path, progress=False)
    text = report.read_text()
    assert "| scripted |" in text and "| linear |" in text and "pass^3" in text
    assert (tmp_path / "heatmap.png").stat().st_size > 0
    summary = json.loads((tmp_path / "evaluation.json").read_text())
    assert len(summary["cells"]) == 4 and len(summary["comparisons"]) == 1
    cells = [json.loads(p.read_text()) for p in sorted((tmp_path / "cells").glob("*.json"))]
    assert len(cells) == 4
    assert len({tuple(c["scenario_ids"]) for c in cells}) == 1, "every cell plays the same tasks"
    for cell in cells:
        assert np.asarray(cell["successes"]).shape == (12, 3)
    for reported in summary["cells"]:
        raw = next(c for c in cells if c["agent"] == reported["agent"] and c["simulator"] == reported["simulator"])
        assert reported["pass_k"]["1"] == pytest.approx(np.mean(raw["successes"]))
        assert reported["pass_k"]["3"] == pytest.approx(pass_hat_k(raw["successes"], 3))
        low, high = reported["success"]["low"], reported["success"]["high"]
        assert low <= reported["success"]["value"] <= high


def test_cells_are_cached_and_a_missing_one_is_played_again(tmp_path):
    evaluate(SETTINGS, ["scripted"], ["family:100", "family:101"], tmp_path, progress=False)
    files = sorted((tmp_path / "cells").glob("*.json"))
    stamps = {p: p.stat().st_mtime_ns for p in files}
    first = json.loads((tmp_path / "evaluation.json").read_text())
    files[0].unlink()
    evaluate(SETTINGS, ["scripted"], ["family:100", "family:101"], tmp_path, progress=False)
    assert files[0].is_file() and files[1].stat().st_mtime_ns == stamps[files[1]], "only the missing cell replays"
    assert json.loads((tmp_path / "evaluation.json").read_text()) == first, "a replayed cell is the same cell"
    evaluate(EvalSettings(ENV, tasks=12, trials=3, seed=1), ["scripted"], ["family:100"], tmp_path, progress=False)
    assert len(list((tmp_path / "cells").glob("*.json"))) == 3, "another task set is another cell"


def test_trained_runs_play_as_agents_and_their_pools_as_simulators(tmp_path):
    run = tmp_path / "population-run"
    config = TrainConfig(
        env=ENV,
        policy="linear",
        method="population",
        simulator_policy="family:0@3",
        simulators=["family:0@3"],
        eval_simulators=["family:100"],
        steps=4,
        groups_per_step=2,
        group_size=2,
        micro_batch=4,
        eval_every=4,
        eval_tasks=2,
        pool_every=2,
        tensorboard=False,
        output_dir=str(run),
    ).validate()
    Trainer(config).run(progress=False)
    out = tmp_path / "eval"
    evaluate(SETTINGS, [str(run), "linear"], ["vs:family:0@3", str(run), f"pool:{run}"], out, progress=False)
    summary = json.loads((out / "evaluation.json").read_text())
    simulators = {c["simulator"] for c in summary["cells"]}
    assert {"vs:family:0@3", "population-run:user", "population-run@0", "population-run@2"} <= simulators
    assert {c["agent"] for c in summary["cells"]} == {"population-run", "linear"}


def test_paired_comparisons_are_corrected_over_the_pairs():
    rng = np.random.default_rng(0)

    def cell(agent, p):
        from baselines.apps.evaluate import CellResult

        return CellResult(agent, "sim", [f"t{i}" for i in range(40)], (rng.random((40, 2)) < p).tolist(), [[0, 0]] * 40)

    summary = summarize([cell("strong", 0.9), cell("weak", 0.1), cell("middle", 0.5)], trials=2)
    assert len(summary["comparisons"]) == 3
    for comparison in summary["comparisons"]:
        assert comparison["holm_p"] >= comparison["p_value"]
    strong_weak = next(c for c in summary["comparisons"] if (c["a"], c["b"]) == ("strong", "weak"))
    assert strong_weak["low"] > 0.5 and strong_weak["holm_p"] < 0.001


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--agents", "scripted", "--simulators", "nosuchbackend:x"], "unknown policy spec"),
        (["--agents", "scripted", "--simulators", "family:100", "family:100"], "same label"),
        (["--agents", "scripted", "--simulators", "family:100", "--tasks", "0"], "at least 1"),
        (["--agents", "scripted", "--simulators", "pool:nowhere"], "not a run folder"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(tmp_path, capsys, arguments, message):
    assert main(["evaluate", "--env", ENV, "--out", str(tmp_path), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_the_command_writes_the_table_the_heatmap_and_the_tests(tmp_path, capsys):
    code = main(
        [
            *(
                "evaluate",
                "--env",
                ENV,
                "--agents",
                "scripted",
                "linear",
                "--simulators",
                "family:100",
                "vs3:family:0@3",
            ),
            *("--tasks", "8", "--trials", "2", "--out", str(tmp_path)),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "Paired comparisons" in printed and "vs3:family:0@3" in printed
    assert {p.name for p in tmp_path.iterdir()} >= {"evaluation.md", "evaluation.json", "heatmap.png", "cells"}


def test_the_panel_leaves_out_the_simulators_a_run_trained_against(tmp_path):
    run = tmp_path / "single-run"
    config = TrainConfig(
        env=ENV,
        policy="linear",
        method="single",
        simulators=["family:0@3/spread1"],  # another spelling of the panel's family:0@3
        eval_simulators=["family:100"],
        steps=2,
        groups_per_step=2,
        group_size=2,
        micro_batch=4,
        eval_every=2,
        eval_tasks=2,
        tensorboard=False,
        output_dir=str(run),
    ).validate()
    Trainer(config).run(progress=False)
    out = tmp_path / "eval"
    simulators = ["family:0@3", "family:100", "vs3:family:0@3", "family:101"]
    evaluate(SETTINGS, [str(run), "linear"], simulators, out, progress=False)
    summary = json.loads((out / "evaluation.json").read_text())
    trained = summary["agents"]["single-run"]
    assert trained["training"] == ["family:0@3", "vs3:family:0@3"]
    assert trained["held_out"] == ["family:100", "family:101"]
    cells = {
        (c["agent"], c["simulator"]): c for c in (json.loads(p.read_text()) for p in (out / "cells").glob("*.json"))
    }
    held_out = np.mean([np.mean(cells[("single-run", s)]["successes"], axis=1) for s in trained["held_out"]], axis=0)
    assert trained["panel"]["value"] == pytest.approx(held_out.mean())
    untrained = summary["agents"]["linear"]
    assert untrained["training"] == [] and len(untrained["held_out"]) == 4
    [comparison] = summary["comparisons"]
    assert comparison["simulators"] == ["family:100", "family:101"], "pairs compare on what both were not trained on"
    marked = {(c["agent"], c["simulator"]) for c in summary["cells"] if c["training"]}
    assert marked == {("single-run", "family:0@3"), ("single-run", "vs3:family:0@3")}
    text = (out / "evaluation.md").read_text()
    assert "(T)" in text and "| family:0@3, vs3:family:0@3 |" in text


def test_a_run_trained_on_the_whole_panel_has_no_held_out_panel():
    cell = CellResult("ceiling", "sim", ["t0", "t1"], [[1, 0], [1, 1]], [[1, 0], [1, 1]])
    summary = summarize([cell], trials=2, training={"ceiling": ["sim"]})
    assert summary["agents"]["ceiling"]["panel"] is None and summary["agents"]["ceiling"]["mde"] is None
    assert summary["cells"][0]["training"]


def test_flip_rate_and_minimum_detectable_difference_on_hand_built_cells():
    from scipy import stats

    a = CellResult("a", "sim", ["t0", "t1", "t2", "t3"], [[1, 1, 1], [0, 0, 0], [1, 0, 0], [1, 1, 0]], [[0] * 3] * 4)
    b = CellResult("b", "sim", a.scenario_ids, [[1, 1, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]], [[0] * 3] * 4)
    summary = summarize([a, b], trials=3)
    flips = {c["agent"]: (c["flip_rate"], c["mixed_tasks"]) for c in summary["cells"]}
    assert flips["a"] == (pytest.approx(1 / 3), 0.5) and flips["b"] == (pytest.approx(1 / 6), 0.25)
    assert summary["cells"][0]["task_flip_rates"] == pytest.approx([0, 0, 2 / 3, 2 / 3]), "each task's own"
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    per_task_a = np.array([1, 0, 1 / 3, 2 / 3])
    assert summary["agents"]["a"]["mde"] == pytest.approx(z * np.sqrt(2) * per_task_a.std(ddof=1) / 2)
    differences = per_task_a - np.array([1, 1 / 3, 0, 0])
    assert summary["comparisons"][0]["mde"] == pytest.approx(z * differences.std(ddof=1) / 2)
    assert (summary["alpha"], summary["power"], summary["tasks"], summary["trials"]) == (0.05, 0.8, 4, 3)


def test_all_tasks_plays_every_task_of_the_split_once(tmp_path):
    """`--tasks all` (a leaderboard's configuration): each task of the split once, `trials` episodes each."""
    pytest.importorskip("tau2")
    settings = EvalSettings("Tau2Airline", tasks="all", trials=2, split="test")
    env = find_env("Tau2Airline").make()
    players = [build_agent("scripted", env)], [build_simulators("scripted", env)[0]]
    (result,) = run_cells(settings, *players, tmp_path, progress=False)
    assert [scenario.removeprefix("airline/") for scenario in result.scenario_ids] == env.task_ids("test")
    assert len(result.successes) == 20 and all(trials == [1.0, 1.0] for trials in result.successes)
    with pytest.raises(ValueError, match="at least 1 or 'all'"):
        EvalSettings(ENV, tasks="some").validate()
