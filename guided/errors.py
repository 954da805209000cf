"""The one error hierarchy of guided.

This module imports nothing, so every layer (grammar, engine, kernels) may raise these without
pulling in the user-facing package. Errors that report bad input also derive from ValueError.
"""

__all__ = [
    "GuidedError",
    "ConfigError",
    "TokenizerError",
    "ModelLoadError",
    "GrammarError",
    "SchemaError",
    "CompileTimeoutError",
    "LimitError",
    "EngineDeadError",
]


class GuidedError(Exception):
    """Root of every error guided raises on purpose."""


class ConfigError(GuidedError, ValueError):
    """A configuration or parameter value is invalid; ``param`` names the field when there is one."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class TokenizerError(GuidedError, ValueError):
    """A tokenizer cannot be loaded or its vocabulary cannot be read exactly."""


class ModelLoadError(GuidedError, ValueError):
    """A model directory is missing, incomplete, or would need a download."""


class GrammarError(GuidedError, ValueError):
    """A regex or grammar is malformed or uses a construct that cannot be enforced exactly."""


class SchemaError(GuidedError, ValueError):
    """A JSON Schema is malformed or uses a keyword that cannot be enforced exactly."""

    def __init__(self, message: str, path: str = "#"):
        super().__init__(f"{message} (at {path})" if path else message)
        self.path = path


class CompileTimeoutError(GuidedError, TimeoutError):
    """Compiling a constraint took longer than its time bound."""


class LimitError(GuidedError, ValueError):
    """A configured limit (size, depth, count) was exceeded; the message names it."""


class EngineDeadError(GuidedError, RuntimeError):
    """The engine cannot run another step: a tensor-parallel worker is gone, or it was shut down."""
