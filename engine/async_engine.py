"""AsyncEngine: an asyncio front over LLMEngine whose loop runs in its own thread.

The event loop never runs model code: ``generate`` hands the request to the engine thread through a
queue and awaits its outputs on a per-request asyncio queue. Cancelling the consumer (a client that
disconnects) aborts the request, which frees its blocks. ``shutdown`` lets requests in flight finish
for a grace period, then ends the rest with an error output (never a silent hang).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator
from itertools import count

from .llm_engine import LLMEngine
from .request import RequestOutput
from .sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class AsyncEngine:
    """Serve an ``LLMEngine`` to coroutines.

    Parameters
    ----------
    engine : LLMEngine
        Owned by the engine thread from now on; do not call it from elsewhere.
    """

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._wake = threading.Event()
        self._stopped = False
        self._ids = count()
        self._ended: list[str] = []  # requests the engine thread ended at stop
        self._thread = threading.Thread(target=self._loop, name="guided-engine", daemon=True)
        self._thread.start()

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        grammar=None,
    ) -> AsyncIterator[RequestOutput]:
        """Yield the request's outputs as they come (``delta_text``/``delta_token_ids`` hold what is new).

        The last output has ``finished`` set. Errors from ``add_request`` (a bad prompt) are raised here.
        ``grammar`` is passed to ``LLMEngine.add_request`` (a compiled grammar or a compile in flight).
        """
        if self._stopped:
            raise RuntimeError("the engine is shut down")
        request_id = f"async-{next(self._ids)}" if request_id is None else str(request_id)
        stream: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = (asyncio.get_running_loop(), stream)
        self._send(("add", request_id, prompt, params, grammar))
        finished = False
        try:
            while not finished:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self._send(("abort", request_id))

    def abort(self, request_id: str) -> None:
        """Abort a request from any thread or coroutine."""
        self._send(("abort", str(request_id)))

    def shutdown(self, grace_s: float = 0.0, timeout: float | None = 10.0) -> list[str]:
        """Stop the engine thread; returns the ids of the requests it had to end.

        New requests are refused at once. Requests in flight may finish for up to ``grace_s`` seconds
        (call this off the event loop when ``grace_s > 0``: their outputs travel through it); the rest
        end with ``finish_reason == "error"`` (their consumers get that output) and free their blocks.
        """
        already, self._stopped = self._stopped and not self._thread.is_alive(), True
        deadline = time.monotonic() + grace_s
        while self._streams and time.monotonic() < deadline:
            time.sleep(0.01)
        self._send(("stop",))
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.engine.close()  # tensor-parallel workers stop with it
        if self._ended and not already:
            logger.warning(
                "engine shut down with %d request(s) unfinished: %s", len(self._ended), self._ended
            )
        return list(self._ended)

    # ------------------------------------------------------------------ engine thread
    def _send(self, command: tuple) -> None:
        self._commands.put(command)
        self._wake.set()

    def _loop(self) -> None:
        while True:
            if not self.engine.has_unfinished():
                self._wake.wait()
            self._wake.clear()
            if not self._drain_commands():
                return
            if self.engine.has_unfinished():
                self._step()

    def _drain_commands(self) -> bool:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True
            if command[0] == "stop":
                self._end_all()
                return False
            if command[0] == "abort":
                self.engine.abort(command[1])
            else:
                self._add(*command[1:])

    def _end_all(self) -> None:
        for request_id in list(self.engine.requests):
            out = self.engine.fail_request(request_id, "the engine shut down before this request finished")
            self._ended.append(request_id)
            if out is not None:
                self._deliver(request_id, out)

    def _add(self, request_id: str, prompt, params, grammar) -> None:
        try:
            self.engine.add_request(prompt, params, request_id=request_id, grammar=grammar)
        except Exception as e:  # a bad request fails alone
            self._deliver(request_id, e)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:  # never leave awaiting clients hanging
            logger.exception("engine step failed")
            for request_id in list(self._streams):
                self.engine.abort(request_id)
                self._deliver(request_id, e)
            return
        for out in outputs:
            self._deliver(out.request_id, out)

    def _deliver(self, request_id: str, item) -> None:
        target = self._streams.get(request_id)
        if target is not None:
            loop, stream = target
            loop.call_soon_threadsafe(stream.put_nowait, item)
