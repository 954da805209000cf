"""Where the shared data directory is (``../shared`` beside the checkout, or ``GUIDED_SHARED``), and a
skip naming what is missing when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))

TOKENIZER_FILES = {
    "llama3": SHARED / "tokenizers" / "llama3" / "tokenizer.model",
    "mistral": SHARED / "tokenizers" / "mistral-v1" / "tokenizer.model",
}


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or a skip naming what is missing."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data directory beside the checkout); CI has it")
    return path
