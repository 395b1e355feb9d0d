"""The web app of `scope serve` and `scope view`: FastAPI, plain HTML/JS pages served by the app.

* `/` play (`play_api`): pick env, side, opponent, scenario; chat; tool calls through forms
  built from the side's OpenAI tool schemas; the reward breakdown; the opponent's VS candidates.
* `/study?participant=ID&token=T` a human study (`study_api`), stored in SQLite (`StudyStore`).
* `/view` the episodes a training run saved (`viewer_api`).

Security (docs/security.md): `guard.Guard` checks the Host and Origin, caps request bodies and
sets the security headers; every input has a length limit (`api_models`) and a refused one is
never echoed back; a game or a participant is reached only with its own secret token; opponents
are the specs the server was started with, shown by label (a browser never names a policy, so API
keys and local paths stay on the server); an env whose tools run code is offered only when named,
never in public mode; with `access_token` set (a public address) every request needs it once, as
`?access=` (then kept in a cookie, `Secure` in public mode) or a header.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import warnings
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from baselines.apps.people.api_models import ServerSettings
from baselines.apps.people.guard import LOOPBACK_HOSTS, Guard, same_secret
from baselines.apps.people.play_api import play_router
from baselines.apps.people.storage import StudyStore
from baselines.apps.people.study import check_scenarios
from baselines.apps.people.study_api import StudyRunner, enrol_all, study_router
from baselines.apps.people.viewer_api import viewer_router

STATIC = Path(__file__).parent / "static"
ACCESS_COOKIE = "scope_access"
PAGES = {"/": "play.html", "/study": "study.html", "/view": "view.html"}


def create_app(settings: ServerSettings) -> FastAPI:
    """The app; a study file's scenarios are checked, its stored participants checked against its
    conditions, and its participants enrolled first."""
    moves = ThreadPoolExecutor(settings.move_workers, thread_name_prefix="scope-moves")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        moves.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="SCOPE", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    runner = None
    if settings.study is not None and settings.study_db is not None:
        if settings.public and settings.study.env in _code_running([settings.study.env]):
            raise ValueError(f"{settings.study.env} runs code its players write; never on a public address")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_scenarios(settings.study)
        store = StudyStore(settings.study_db)
        runner = StudyRunner(settings.study, store)
        enrol_all(settings.study, store)
    app.state.study = runner
    app.state.moves = moves
    app.add_exception_handler(RequestValidationError, _refused_input)
    if settings.access_token:
        _require_access(app, settings.access_token, secure=settings.public)
    app.add_middleware(Guard, hosts=[*LOOPBACK_HOSTS, *settings.hosts])
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for path, page in PAGES.items():
        app.add_api_route(path, _page(page), methods=["GET"], include_in_schema=False)
    app.include_router(play_router(settings, moves))
    app.include_router(study_router(runner, moves))
    app.include_router(viewer_router(settings.run_dir))
    return app


def _code_running(envs: list[str]) -> list[str]:
    from scope_envs.core.registration import find_env

    return [name for name in envs if find_env(name).runs_code]


async def _refused_input(request: Request, error: Exception) -> JSONResponse:
    """422 naming each wrong field and why, never echoing what was sent."""
    problems = [
        {"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", ""))[:300], "type": e.get("type")}
        for e in getattr(error, "errors", list)()[:20]
    ]
    return JSONResponse({"detail": problems}, 422)


def _page(name: str) -> Any:
    async def page() -> FileResponse:
        return FileResponse(STATIC / name)

    return page


def cookie_value(token: str) -> str:
    """What the access cookie holds: derived from the token, so that a stolen cookie is not it."""
    return hmac.new(token.encode(), b"scope access cookie", hashlib.sha256).hexdigest()


def _require_access(app: FastAPI, expected: str, *, secure: bool) -> None:
    cookie = cookie_value(expected)

    @app.middleware("http")
    async def require_access(request: Request, call_next: Any) -> Response:
        given = request.query_params.get("access") or request.headers.get("x-access-token") or ""
        allowed = same_secret(given, expected) or same_secret(request.cookies.get(ACCESS_COOKIE, ""), cookie)
        if not allowed:
            return JSONResponse({"detail": "this server needs its access token (?access=TOKEN)"}, 401)
        response = await call_next(request)
        if request.query_params.get("access"):
            response.set_cookie(ACCESS_COOKIE, cookie, httponly=True, samesite="strict", secure=secure)
        return response
