"""The server's guards: API-key check, request-body limit (plain ASGI), and graceful shutdown.

Both middlewares answer before the app runs, with an OpenAI error object; being plain ASGI (not
Starlette's ``BaseHTTPMiddleware``) they leave streaming and disconnect detection intact.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import uvicorn

__all__ = ["ApiKeyCheck", "BodyLimit", "GracefulServer", "OPEN_PATHS"]

BACKSTOP_S = 10.0  # after our grace period, uvicorn cancels what is still running
OPEN_PATHS = frozenset({"/health"})  # answered without the API key (liveness probes)


async def _answer(send, status: int, message: str, type_: str, code: str, param=None, headers=()) -> None:
    body = json.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class ApiKeyCheck:
    """401 for every request but ``/health`` that lacks ``Authorization: Bearer <api_key>``."""

    def __init__(self, app, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"authorization", b"")
        if not secrets.compare_digest(given, self.expected):  # constant time
            return await _answer(send, 401, "invalid or missing API key (Authorization: Bearer ...)",
                                 "authentication_error", "invalid_api_key",
                                 headers=[(b"www-authenticate", b"Bearer")])  # fmt: skip
        return await self.app(scope, receive, send)


class BodyLimit:
    """413 for a request body over ``limit`` bytes, told by Content-Length or counted as it arrives.

    The body is read here (the JSON routes read it whole anyway) and replayed to the app; later
    ``receive`` calls go to the client's, so a disconnect is still seen.
    """

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await self._too_large(send, int(length))
        chunks, size, first = [], 0, None
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left while sending
                first = message
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await self._too_large(send, size, "at least ")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        pending = [first or {"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay():
            return pending.pop() if pending else await receive()

        return await self.app(scope, replay, send)

    async def _too_large(self, send, size: int, qualifier: str = "") -> None:
        message = (f"body_bytes limit exceeded at the request body: {qualifier}{size} bytes > {self.limit} "
                   "(Limits.body_bytes)")  # fmt: skip
        await _answer(send, 413, message, "invalid_request_error", "limit_exceeded")


class GracefulServer(uvicorn.Server):
    """A uvicorn server whose shutdown refuses new requests at once (503), lets those in flight run
    for ``grace_s`` seconds (None: until they end), then ends the rest with an error (503, or an error
    event in a stream); the model logs which finished and which were aborted."""

    def __init__(self, config: uvicorn.Config, served, grace_s: float | None = 30.0):
        if grace_s is not None:  # uvicorn's own bound only backs ours up
            config.timeout_graceful_shutdown = grace_s + BACKSTOP_S
        super().__init__(config)
        self.served, self.grace_s = served, grace_s

    async def shutdown(self, sockets=None) -> None:
        self.served.begin_shutdown()
        ender = None if self.grace_s is None else asyncio.ensure_future(self._end_in_flight())
        try:
            await super().shutdown(sockets)
        finally:
            if ender is not None:
                ender.cancel()

    async def _end_in_flight(self) -> None:
        await asyncio.sleep(self.grace_s)
        await asyncio.to_thread(self.served.async_engine.shutdown)  # remaining requests end with an error
