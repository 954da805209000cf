"""Serving engine: config, sequences, block manager, scheduler, model runner, models.

Names are resolved lazily so that the pure-Python parts (block manager, scheduler) import without torch.
"""

_LAZY = {
    "Config": "guided.engine.config",
    "SamplingParams": "guided.engine.sampling_params",
    "Sequence": "guided.engine.sequence",
    "BlockManager": "guided.engine.block_manager",
    "Scheduler": "guided.engine.scheduler",
    "LLMEngine": "guided.engine.llm_engine",
    "AsyncEngine": "guided.engine.async_engine",
    "RequestOutput": "guided.engine.request",
    "CompletionOutput": "guided.engine.request",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guided.engine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
