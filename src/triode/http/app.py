"""create_app(handles) → QuartTrio.

Under `triode serve` the actor tree is started first (system.py) and hands its handles in.
Under plain hypercorn (`hypercorn --worker-class trio 'triode.http.app:create_app()'`) there
are no handles yet: the app then starts the actor tree in its own lifespan nursery, with
settings read from the environment.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

import attrs
from quart import request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from ..actors.store import StoreDisabled
from ..errors import APIError, InvalidRequest, ServerError, Unauthorized
from .routes import api, json_response
from .translate import Defaults

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
OPEN_PATHS = ("/health", "/v1/health")


@attrs.frozen
class Handles:
    """What the HTTP layer is given: actor handles and a few fixed facts."""

    model: Any            # ModelHandle
    registry: Any         # RegistryHandle
    responses: Any        # ResponseStoreHandle
    conversations: Any    # ConversationStoreHandle
    echo: Any             # ReasoningEchoHandle
    model_names: tuple[str, ...]
    defaults: Defaults
    blas: str
    api_key: str | None = None
    hosted_tools: str = "error"
    background_off: str | None = None   # why background mode is off, if it is
    started_at: int = attrs.Factory(lambda: int(time.time()))


def create_app(handles: Handles | None = None) -> QuartTrio:
    app = QuartTrio(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["TRIODE_HANDLES"] = handles
    app.register_blueprint(api)

    if handles is None:
        @app.before_serving
        async def start_actor_tree() -> None:
            from ..settings import resolve
            from ..system import start_actors

            app.config["TRIODE_HANDLES"] = await app.nursery.start(start_actors, resolve())

    @app.before_request
    async def authenticate() -> None:
        key = app.config["TRIODE_HANDLES"].api_key
        if key is None or request.path in OPEN_PATHS:
            return
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            raise Unauthorized("Incorrect API key provided.")

    @app.errorhandler(APIError)
    async def api_error(exc: APIError):
        return json_response(exc.body(), exc.status)

    @app.errorhandler(StoreDisabled)
    async def store_disabled(exc: StoreDisabled):
        err = InvalidRequest(str(exc))
        return json_response(err.body(), err.status)

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException):
        status = exc.code or 500
        err = InvalidRequest(exc.description or exc.name) if status < 500 else ServerError(
            exc.description or exc.name)
        if status == 404:
            err.code = "not_found"
        return json_response(err.body(), status)

    @app.errorhandler(Exception)
    async def unexpected(exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.path)
        err = ServerError(f"The server had an error processing your request ({type(exc).__name__}).")
        return json_response(err.body(), 500)

    return app
