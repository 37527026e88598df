"""One exception hierarchy, mapped to OpenAI's error body, type, code and HTTP status."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}


class InvalidRequest(APIError):
    status = 400
    type = "invalid_request_error"


class ModelNotFound(InvalidRequest):
    code = "model_not_found"


class NotSupportedYet(InvalidRequest):
    code = "unsupported_parameter"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class NotFound(APIError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class RateLimited(APIError):
    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"


class Overloaded(APIError):
    status = 503
    type = "server_error"
    code = "server_overloaded"


class ServerError(APIError):
    status = 500
    type = "server_error"
    code = "server_error"


class Unauthorized(APIError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
