"""Errors a client can cause, as OpenAI-shaped JSON: {"error": {"message", "type", "code"}} with an HTTP status."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """Raised anywhere in a request's handling; the app turns it into a JSON response with this status."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code or _CODES.get(status, "error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code}}


_CODES = {
    400: "bad_request",
    401: "invalid_api_key",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    500: "internal_error",
    503: "unavailable",
}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def unavailable(message: str, retry_after_s: int = 1) -> ApiError:
    return ApiError(503, message, type="server_overloaded", headers={"Retry-After": str(retry_after_s)})


def engine_failed(message: str) -> ApiError:
    """A request the engine could not complete: never a normal answer."""
    return ApiError(500, message, type="engine_error", code="request_failed")
