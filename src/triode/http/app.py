"""create_app(handles) → QuartTrio.

Under `triode serve` the actor tree is started first (`system.start_actors`, from cli.py) and
hands its handles in. Under plain hypercorn (`hypercorn --worker-class trio
'triode.http.app:create_app()'`) there are no handles yet: the app then starts the same actor
tree (the same `system.start_actors`) in its own lifespan nursery, with settings read from the
environment. Everything here is transport: auth, body limits, error rendering, the access log
(access.py, outermost); the routes are in routes.py and monitoring.py.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Mapping

from quart import Response, g, has_request_context, request
from quart import websocket as upgrade_request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from ..errors import APIError, InvalidRequest, ServerError, SettingsError, Unauthorized
from ..settings import resolve
from ..system import Handles, start_actors, startup_error
from ..tenants import Caller
from . import chat  # noqa: F401  (mounts /chat/completions on the blueprint)
from . import completions  # noqa: F401  (mounts /completions on the blueprint)
from .anthropic import anthropic_error, is_anthropic   # (mounts /messages on the blueprint)
from . import conversations  # noqa: F401  (mounts /conversations on the blueprint)
from . import models  # noqa: F401  (mounts /models on the blueprint)
from . import monitoring  # noqa: F401  (mounts /health and /metrics on the blueprint)
from . import openapi  # noqa: F401  (mounts /openapi.json on the blueprint)
from . import ui  # (mounts the live page, /ui, on the blueprint)
from . import websocket  # noqa: F401  (mounts the Responses WebSocket on the blueprint)
from .access import AccessLog, access_record, record_route
from .body import MAX_BODY_BYTES, json_response
from .caller import tell as tell_caller
from .guard import ConnectionGuard
from .routes import api
from .transport import install as install_write_timeout

log = logging.getLogger(__name__)

OPEN_PATHS = ("/health", "/v1/health", "/openapi.json", "/v1/openapi.json", *ui.OPEN_PATHS)


def create_app(handles: Handles | None = None, *, access_log: bool = True) -> QuartTrio:
    """`access_log`: whether each request is logged (`--access-log`); under plain hypercorn
    the lifespan reads it from the environment with the other settings."""
    app = QuartTrio(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["TRIODE_HANDLES"] = handles
    app.register_blueprint(api)
    # Quart's documented way to add ASGI middleware; its typed signature is the ASGI union.
    access = AccessLog(ConnectionGuard(app.asgi_app, max_body_bytes=MAX_BODY_BYTES),
                       enabled=access_log)
    app.asgi_app = access  # type: ignore[method-assign,assignment]
    app.config["TRIODE_ACCESS"] = access   # its figures, for /metrics

    if handles is None:
        @app.before_serving
        async def start_actor_tree() -> None:
            try:
                settings = resolve()
                access.enabled = settings.access_log == "on"
                install_write_timeout(settings.write_timeout, settings.shutdown_timeout)
                app.config["TRIODE_HANDLES"] = await app.nursery.start(start_actors, settings)
            except (SettingsError, BaseExceptionGroup) as exc:
                error = startup_error(exc)
                if error is None:
                    raise
                # One line and a non-zero exit, as `triode serve` does; raising would print
                # Quart's and hypercorn's tracebacks, and hypercorn would print "Running on".
                print(f"triode: {error}", file=sys.stderr, flush=True)
                os._exit(1)

    @app.before_request
    async def note_route() -> None:
        """Runs first, so a refused request (401, 404, 405) is counted by route too."""
        record_route(request.scope, request.url_rule.rule if request.url_rule else None)

    @app.before_websocket
    async def note_websocket_route() -> None:
        record_route(upgrade_request.scope,
                     upgrade_request.url_rule.rule if upgrade_request.url_rule else None)

    async def authenticate_as(scope: Mapping[str, Any], authorization: str) -> None:
        """The tenant whose key the request carries (tenants.TenantTable.find: constant
        time, the key never logged) becomes the request's `Caller` (caller.py), and the
        access log is told its name; a request over the tenant's requests per minute is a
        429."""
        handles: Handles = app.config["TRIODE_HANDLES"]
        tenant = handles.tenants.table.find(authorization)
        if tenant is None:
            raise Unauthorized("Incorrect API key provided.")
        tell_caller(Caller(tenant))
        if tenant.name:
            access_record(scope).record_tenant(tenant.name)
        if handles.limits is not None and tenant.limits.requests_per_minute is not None:
            g.ratelimit_headers = await handles.limits.request(tenant)

    @app.before_request
    async def authenticate() -> None:
        """The key as `Authorization: Bearer KEY`, or as `x-api-key: KEY` (what Anthropic's
        clients send)."""
        if request.path not in OPEN_PATHS:
            authorization = request.headers.get("Authorization", "")
            if not authorization and "x-api-key" in request.headers:
                authorization = f"Bearer {request.headers['x-api-key']}"
            await authenticate_as(request.scope, authorization)

    @app.before_websocket
    async def authenticate_websocket() -> None:
        """Quart runs no before_request for a WebSocket: the same check, answered with the
        401 before the upgrade is accepted."""
        await authenticate_as(upgrade_request.scope,
                              upgrade_request.headers.get("Authorization", ""))

    @app.after_request
    async def ratelimit_headers(response: Response) -> Response:
        """A tenant with a requests-per-minute limit sees where it stands on every answer,
        as OpenAI's x-ratelimit-* headers say it."""
        response.headers.update(g.get("ratelimit_headers", {}))
        return response

    def render(err: APIError, status: int) -> Response:
        """OpenAI's error object, or Anthropic's on Anthropic's routes (a WebSocket's
        refusal has no request: OpenAI's)."""
        if has_request_context() and is_anthropic(request.path):
            return anthropic_error(status, err.message, err.headers())
        response = json_response(err.body(), status)
        response.headers.update(err.headers())
        return response

    @app.errorhandler(APIError)
    async def api_error(exc: APIError) -> Response:
        return render(exc, exc.status)

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        err = InvalidRequest(exc.description or exc.name) if status < 500 else ServerError(
            exc.description or exc.name)
        if status == 404:
            err.code = "not_found"
        return render(err, status)

    @app.errorhandler(Exception)
    async def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.path)
        err = ServerError(f"The server had an error processing your request ({type(exc).__name__}).")
        return render(err, 500)

    return app
