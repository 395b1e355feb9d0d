"""The web app of `scope serve` and `scope view`: FastAPI, plain HTML/JS pages served by the app.

* `/` play (`play_api`): pick env, side, opponent, scenario; chat; tool calls through forms
  built from the side's OpenAI tool schemas; the reward breakdown; the opponent's VS candidates.
* `/study?participant=ID&token=T` a human study (`study_api`), stored in SQLite (`StudyStore`).
* `/view` the episodes a training run saved (`viewer_api`).

Security: every input has a length limit (`api_models`); a game or a participant is reached only
with its own secret token; opponents are the specs the server was started with (a browser never
names a policy, so API keys and local paths stay on the server); with `access_token` set (a
public address) every request needs it once, as `?access=` (then kept in a cookie) or a header.
"""

from __future__ import annotations

import secrets
import warnings
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from baselines.people.api_models import ServerSettings
from baselines.people.play_api import play_router
from baselines.people.storage import StudyStore
from baselines.people.study import check_scenarios
from baselines.people.study_api import StudyRunner, enrol_all, study_router
from baselines.people.viewer_api import viewer_router

STATIC = Path(__file__).parent / "static"
ACCESS_COOKIE = "scope_access"
PAGES = {"/": "play.html", "/study": "study.html", "/view": "view.html"}


def create_app(settings: ServerSettings) -> FastAPI:
    """The app; a study file's scenarios are checked and its participants enrolled first."""
    app = FastAPI(title="SCOPE", docs_url=None, redoc_url=None, openapi_url=None)
    runner = None
    if settings.study is not None and settings.study_db is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_scenarios(settings.study)
        store = StudyStore(settings.study_db)
        enrol_all(settings.study, store)
        runner = StudyRunner(settings.study, store)
    app.state.study = runner
    if settings.access_token:
        _require_access(app, settings.access_token)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for path, page in PAGES.items():
        app.add_api_route(path, _page(page), methods=["GET"], include_in_schema=False)
    app.include_router(play_router(settings))
    app.include_router(study_router(runner))
    app.include_router(viewer_router(settings.run_dir))
    return app


def _page(name: str) -> Any:
    def page() -> FileResponse:
        return FileResponse(STATIC / name)

    return page


def _require_access(app: FastAPI, expected: str) -> None:
    @app.middleware("http")
    async def require_access(request: Request, call_next: Any) -> Response:
        given = (
            request.query_params.get("access")
            or request.headers.get("x-access-token")
            or request.cookies.get(ACCESS_COOKIE)
            or ""
        )
        if not secrets.compare_digest(given, expected):
            return JSONResponse({"detail": "this server needs its access token (?access=TOKEN)"}, 401)
        response = await call_next(request)
        if request.query_params.get("access"):
            response.set_cookie(ACCESS_COOKIE, expected, httponly=True, samesite="strict")
        return response
