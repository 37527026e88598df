"""One exception hierarchy. `APIError` and its subclasses map to OpenAI's error body, type,
code and HTTP status; the HTTP layer renders any of them without knowing which it is.

    TriodeError
    ├── SettingsError          a setting that cannot start a server (names the flag)
    └── APIError               500 server_error
        ├── InvalidRequest     400 (ModelNotFound, NotSupportedYet, ContextLengthExceeded,
        │                           StoreDisabled, constraints.InvalidSchema; with their own
        │                           status: PayloadTooLarge 413, UnsupportedMediaType 415)
        ├── Unauthorized       401
        ├── Forbidden          403 (a model admin route without an admin key)
        │                           ModelNotLoaded: --no-autoload)
        ├── NotFound           404
        ├── Conflict           409 (ModelBusy: an unload of a model in use)
        ├── ExternalConnectorError 424 (an MCP server's tools could not be listed)
        ├── RateLimited        429
        ├── ServerError        500 (ModelLoadFailed: the named model failed to load)
        ├── Overloaded         503 (ModelUnavailable, with Retry-After: no room to load the
        │                           model, or its load outlasted --load-timeout)
        └── StoreUnavailable   503 (with Retry-After: the shared store is unreachable)
"""

from __future__ import annotations

import copy
from typing import TypedDict, TypeVar


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None      # the offending field's JSON path (`input[2].content`), if one
    code: str | None


class ErrorBody(TypedDict):
    """What every error response's body is (OpenAI's error object)."""

    error: ErrorDetail


class TriodeError(Exception):
    """Every error triode raises on purpose."""


E = TypeVar("E", bound="APIError")


class SettingsError(TriodeError, ValueError):
    """A setting that cannot start a server; the message names the flag."""


class APIError(TriodeError):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> ErrorBody:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        """HTTP headers the error's response carries (e.g. Retry-After)."""
        return {}


def renamed(exc: E, param: str | None) -> E:
    """The same error naming its field as `param` (the field of another API's request that
    a translated one came from), in its message too."""
    new = copy.copy(exc)
    if exc.param and param:
        new.message = exc.message.replace(exc.param, param)
        new.args = (new.message,)
    new.param = param
    return new


class InvalidRequest(APIError):
    status = 400
    type = "invalid_request_error"


class ModelNotFound(InvalidRequest):
    code = "model_not_found"


class ModelNotLoaded(InvalidRequest):
    """--no-autoload and the named model is not loaded."""

    code = "model_not_loaded"


class NotSupportedYet(InvalidRequest):
    code = "unsupported_parameter"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class PayloadTooLarge(InvalidRequest):
    status = 413


class UnsupportedMediaType(InvalidRequest):
    status = 415


class StoreDisabled(InvalidRequest):
    """A store configured with `max_entries == 0`: its routes answer 400."""


class NotFound(APIError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ExternalConnectorError(APIError):
    """An MCP server named by the request could not be listed (OpenAI's 424)."""

    status = 424
    type = "external_connector_error"
    code = "external_connector_error"


class RateLimited(APIError):
    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"


class Overloaded(APIError):
    status = 503
    type = "server_error"
    code = "server_overloaded"


class ModelUnavailable(Overloaded):
    """The named model cannot be loaded now: the models loaded are all busy or pinned, or
    its load takes longer than the request may wait. Worth retrying after
    `retry_after_secs`."""

    code = "model_unavailable"

    def __init__(self, message: str, *, retry_after_secs: int = 5):
        super().__init__(message, param="model")
        self.retry_after_secs = retry_after_secs

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_secs)}


class Conflict(APIError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class ModelBusy(Conflict):
    code = "model_busy"


class StoreUnavailable(APIError):
    """The shared store (--store redis://...) cannot be reached; worth retrying soon."""

    status = 503
    type = "server_error"
    code = "store_unavailable"
    retry_after_secs = 1

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_secs)}


class ServerError(APIError):
    status = 500
    type = "server_error"
    code = "server_error"


class ModelLoadFailed(ServerError):
    """The named model failed to load (the message says why, in one line)."""

    code = "model_load_failed"


class Forbidden(APIError):
    status = 403
    type = "invalid_request_error"
    code = "forbidden"


class Unauthorized(APIError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
