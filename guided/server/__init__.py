"""The OpenAI-compatible server: request models (``protocol``), one served model (``served_model``),
the FastAPI app and its routes (``app``), responses, errors, guards and metrics. Tool-call formats
and parsing live in ``guided.tool_calls``, shared with the Python API."""

from guided.server.app import create_app, start_in_thread
from guided.server.served_model import ServedModel

__all__ = ["ServedModel", "create_app", "start_in_thread"]
