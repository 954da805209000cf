"""The ``guided`` command line: ``guided demo``, ``guided vocab TOKENIZER`` (and more as the project grows)."""

from __future__ import annotations

import argparse
import sys
import time

from guided.errors import GuidedError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guided",
        description="Structured generation: constrain a model's output to a JSON Schema, regex or grammar.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the main job on the embedded default model (or --model DIR)")
    demo.add_argument("--model", help="local HF model directory (default: the embedded random-weight model)")
    vocab = sub.add_parser("vocab", help="load a tokenizer and print its vocabulary statistics")
    vocab.add_argument("tokenizer", help="'builtin', a tokenizer directory, tokenizer.json, or a .model file")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "demo":
            from guided.demo import run_demo

            return run_demo(args.model)
        if args.command == "vocab":
            return _vocab(args.tokenizer)
    except GuidedError as e:
        print(f"guided: error: {e}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command!r}")
    return 2


def _vocab(spec: str) -> int:
    from guided.grammar.vocab import Vocabulary
    from guided.tokenizer_files import load_tokenizer

    t0 = time.perf_counter()
    tokenizer = load_tokenizer(spec)
    t1 = time.perf_counter()
    vocab = Vocabulary.from_tokenizer(tokenizer)
    t2 = time.perf_counter()
    print(vocab)
    print(f"tokenizer loaded in {t1 - t0:.2f} s, vocabulary built in {(t2 - t1) * 1e3:.0f} ms")
    eos = ", ".join(f"{i}={vocab.special_text.get(i, vocab.tokens[i])!r}" for i in vocab.eos_ids)
    print(f"EOS: {eos}; prefix space: {vocab.add_prefix_space}")
    return 0
