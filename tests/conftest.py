"""Shared fixtures: tokenizers and vocabularies of the three families, and ../shared's data.

Tests that need ../shared (real tokenizers, MaskBench, grammars) skip with a reason when it is
absent; CI always has it. Override its location with GUIDED_SHARED.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from shared_data import SHARED, TOKENIZER_FILES, shared_path

REPO = Path(__file__).resolve().parents[1]
# No test reads a grammar another test (or an earlier run) compiled: the on-disk grammar cache is off
# for the suite, and the tests of that cache name their own directories.
os.environ["GUIDED_GRAMMAR_CACHE"] = "off"
LONG_TESTS = os.environ.get("GUIDED_LONG_TESTS") == "1"


def _hypothesis_profiles() -> None:
    """Property-based tests draw the same examples on every run (CI cannot flip); with
    ``GUIDED_LONG_TESTS=1`` they draw fresh random ones. A failure either finds becomes a plain test."""
    try:
        from hypothesis import settings
    except ImportError:
        return
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    settings.register_profile("long", derandomize=False, database=None, print_blob=True)
    settings.load_profile("long" if LONG_TESTS else "ci")


_hypothesis_profiles()
@pytest.fixture
def shared():
    """``shared_path`` as a fixture."""
    return shared_path


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    import importlib.util

    has_cuda = False
    if importlib.util.find_spec("torch") is not None:
        import torch

        has_cuda = torch.cuda.is_available()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_slow = pytest.mark.skip(reason="slow; run with --run-slow")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "slow" in item.keywords and not config.getoption("--run-slow"):
            item.add_marker(skip_slow)


def _load(name: str):
    from guided.builtin.tokenizers import load_tokenizer

    if name == "builtin":
        return load_tokenizer("builtin")
    return load_tokenizer(shared_path(*TOKENIZER_FILES[name].relative_to(SHARED).parts))


@pytest.fixture(scope="session")
def tokenizer_builtin():
    return _load("builtin")


@pytest.fixture(scope="session")
def tokenizer_llama3():
    return _load("llama3")


@pytest.fixture(scope="session")
def tokenizer_mistral():
    return _load("mistral")


@pytest.fixture(scope="session", params=["builtin", "llama3", "mistral"])
def any_tokenizer(request):
    """Each of the three tokenizer families: trained byte-level BPE, Llama 3, Mistral SentencePiece."""
    return request.getfixturevalue(f"tokenizer_{request.param}")


def _vocab(tokenizer):
    from guided.grammar.vocab import Vocabulary

    return Vocabulary.from_tokenizer(tokenizer)


@pytest.fixture(scope="session")
def vocab_builtin(tokenizer_builtin):
    return _vocab(tokenizer_builtin)


@pytest.fixture(scope="session")
def vocab_llama3(tokenizer_llama3):
    return _vocab(tokenizer_llama3)


@pytest.fixture(scope="session")
def vocab_mistral(tokenizer_mistral):
    return _vocab(tokenizer_mistral)
