"""The viewer API of `scope view RUN_DIR`: the saved episodes of a run, filtered, one by one, and
the same scenario at its earliest and latest saved step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from baselines.apps.people.episode_store import read_run_episodes, summary


def viewer_router(run_dir: Path | None) -> APIRouter:
    router = APIRouter(prefix="/api/run")

    def episodes() -> list[dict[str, Any]]:
        if run_dir is None:
            raise HTTPException(404, "this server shows no run (scope view RUN_DIR)")
        return read_run_episodes(run_dir)

    @router.get("")
    def listing(
        step: int | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        simulator: str | None = Query(default=None, max_length=200),
        end_reason: str | None = Query(default=None, max_length=100),
    ) -> dict[str, Any]:
        rows = [summary(index, record) for index, record in enumerate(episodes())]
        facets = {
            "steps": sorted({r["step"] for r in rows if r["step"] is not None}),
            "simulators": sorted({r["simulator"] for r in rows}),
            "end_reasons": sorted({r["end_reason"] for r in rows}),
            "scenarios": sorted({r["scenario_id"] for r in rows}),
        }
        kept = [
            r
            for r in rows
            if (step is None or r["step"] == step)
            and (min_reward is None or r["reward"] >= min_reward)
            and (max_reward is None or r["reward"] <= max_reward)
            and (simulator is None or r["simulator"] == simulator)
            and (end_reason is None or r["end_reason"] == end_reason)
        ]
        return {"run": run_dir.name if run_dir else "", "episodes": kept, "facets": facets}

    @router.get("/episodes/{index}")
    def episode(index: int) -> dict[str, Any]:
        saved = episodes()
        if not 0 <= index < len(saved):
            raise HTTPException(404, f"no episode {index}; the run saved {len(saved)}")
        return saved[index]

    @router.get("/compare")
    def compare(scenario_id: str = Query(max_length=200)) -> dict[str, Any]:
        matching = [(i, e) for i, e in enumerate(episodes()) if e["scenario_id"] == scenario_id]
        if not matching:
            raise HTTPException(404, f"no saved episode of scenario {scenario_id!r}")
        ordered = sorted(matching, key=lambda item: (item[1].get("step") or 0, item[0]))
        (first, early), (last, late) = ordered[0], ordered[-1]
        return {"early": {"index": first, **early}, "late": {"index": last, **late}}

    return router
