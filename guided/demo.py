"""``guided demo``: the main job on the embedded default model (or a local model directory).

It prepares the model (the embedded default is built once and cached), reads its vocabulary, and runs
the constraints in ``schemas/demo`` with whatever parts of guided are present. It grows with the
project: today it reports the model, the vocabulary and the demo schemas' statistics.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from guided.errors import ModelLoadError

__all__ = ["run_demo", "demo_schemas"]

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas" / "demo"


def demo_schemas() -> dict[str, dict]:
    """The demo schemas by file stem."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(SCHEMA_DIR.glob("*.json"))}


def run_demo(model: str | None = None) -> int:
    from guided.grammar.vocab import Vocabulary
    from guided.tiny_model import default_model_dir
    from guided.tokenizer_files import load_tokenizer

    t0 = time.perf_counter()
    if model is None:
        model_dir = default_model_dir()
        print(f"guided demo: using the embedded default model ({model_dir.name}): random weights, so its")
        print("text is meaningless; under a constraint it is still always valid. Pass --model DIR for real weights.")
    else:
        model_dir = Path(model).expanduser()
        if not (model_dir / "config.json").exists():
            raise ModelLoadError(f"{model_dir} is not a local HF model directory (no config.json)")
    config = json.loads((model_dir / "config.json").read_text())
    tokenizer = load_tokenizer(model_dir)
    vocab = Vocabulary.from_tokenizer(tokenizer, size=config.get("vocab_size"))
    print(f"model: {config.get('architectures', ['?'])[0]}, {config.get('num_hidden_layers')} layers, "
          f"hidden {config.get('hidden_size')}, lm_head width {config.get('vocab_size')}")
    print(f"vocabulary: {vocab.n_tokens} token ids ({int(vocab.special.sum())} special), padded to {vocab.size}, "
          f"EOS ids {list(vocab.eos_ids)}")
    for name, schema in demo_schemas().items():
        props = schema.get("properties", {})
        print(f"schema {name}: {len(props)} properties, required {schema.get('required', [])}")
    print(f"ready in {time.perf_counter() - t0:.1f} s")
    return 0
