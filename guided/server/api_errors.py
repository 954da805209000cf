"""ApiError: an OpenAI error object (``{"error": {"message", "type", "param", "code"}}``) with its status.

``api_error(exc, param)`` maps guided's own errors to the status a client should see: bad input
(schema, grammar, parameters, limits, compile timeouts) is a 400 naming what is wrong and where.
"""

from __future__ import annotations

from guided.errors import (
    CompileTimeoutError,
    ConfigError,
    EngineDeadError,
    GrammarError,
    GuidedError,
    LimitError,
    SchemaError,  # fmt: skip
)

__all__ = ["ApiError", "api_error"]


class ApiError(Exception):
    """An error answered to the client as an OpenAI error object."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict | None = None):  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


_CODES = (
    (SchemaError, "invalid_schema"),
    (GrammarError, "invalid_grammar"),
    (CompileTimeoutError, "compile_timeout"),
    (LimitError, "limit_exceeded"),
    (ConfigError, "invalid_value"),
)


def api_error(exc: BaseException, param: str | None = None) -> ApiError:
    """The ApiError for an exception raised while preparing or compiling a request."""
    if isinstance(exc, ApiError):
        return exc
    param = param or getattr(exc, "param", None)
    if isinstance(exc, EngineDeadError):  # the server cannot serve anything until it is restarted
        return ApiError(503, str(exc), type_="server_error", code="engine_dead")
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return ApiError(400, str(exc), param=param, code=code)
    if isinstance(exc, RecursionError):  # e.g. a JSON string nested past the parser's recursion limit
        return ApiError(400, "the input nests too deeply to parse", param=param, code="limit_exceeded")
    if isinstance(exc, (GuidedError, ValueError)):
        return ApiError(400, str(exc) or type(exc).__name__, param=param, code="invalid_value")
    return ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error")
