"""guided: structured generation — constraints compiled to token automata, applied in the engine.

The package root stays light: importing ``guided.grammar`` (a leaf) must not pull in torch or the
engine, so the public names below are resolved lazily on first use.
"""

from guided.errors import (
    CompileTimeoutError,
    ConfigError,
    GrammarError,
    GuidedError,
    LimitError,
    ModelLoadError,
    SchemaError,
    TokenizerError,
)

__version__ = "0.1.0"

_LAZY = {
    "LLM": "guided.llm",
    "AsyncLLM": "guided.llm",
    "ToolCall": "guided.tool_calls",
    "SamplingParams": "guided.engine.sampling_params",
    "JsonSchema": "guided.constraints",
    "Regex": "guided.constraints",
    "Choice": "guided.constraints",
    "Grammar": "guided.constraints",
    "StructuralTag": "guided.constraints",
    "Tag": "guided.constraints",
    "CompileService": "guided.compile_service",
    "json_schema_for": "guided.schema.pydantic_models",
    "parse_output": "guided.schema.pydantic_models",
    "json_schema_to_node": "guided.schema.compiler",
    "compile_json_schema": "guided.schema.compiler",
    "GrammarCompiler": "guided.grammar.compiler",
    "Vocabulary": "guided.grammar.vocab",
    "load_tokenizer": "guided.builtin.tokenizers",
    "default_model_dir": "guided.builtin.tiny_model",
    "write_tiny_model": "guided.builtin.tiny_model",
}

__all__ = [
    "CompileTimeoutError",
    "ConfigError",
    "GrammarError",
    "GuidedError",
    "LimitError",
    "ModelLoadError",
    "SchemaError",
    "TokenizerError",
    "__version__",
    *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guided' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
