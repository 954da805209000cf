"""The ``guided`` command line.

``guided demo``, ``guided vocab TOKENIZER``, ``guided serve`` (the OpenAI-compatible server),
``guided generate PROMPT [--schema FILE | --regex R | --grammar FILE | --choice A B ...]`` and
``guided bench {maskbench, json-schema-test-suite, serve} ...`` (the remaining arguments go to the
benchmark) and ``guided warm-up`` (compile the numba code into its on-disk cache now).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from guided.errors import ConfigError, GuidedError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guided",
        description="Structured generation: constrain a model's output to a JSON Schema, regex or grammar.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the main job on the embedded default model (or --model DIR)")
    demo.add_argument("--model", help="local HF model directory or hub name org/name (default: the embedded "
                      "random-weight model)")  # fmt: skip
    vocab = sub.add_parser("vocab", help="load a tokenizer and print its vocabulary statistics")
    vocab.add_argument("tokenizer", help="'builtin', a tokenizer directory, tokenizer.json, or a .model file")
    _add_serve(sub)
    _add_generate(sub)
    warm = sub.add_parser("warm-up", help="compile guided's numba code into its on-disk cache now (a cold "
                          "process spends ~60 s there before its first masks)")  # fmt: skip
    warm.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    bench = sub.add_parser("bench", help="run a benchmark: maskbench, json-schema-test-suite or serve")
    bench.add_argument("suite", choices=sorted(BENCHMARKS), help="which benchmark")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (see guided bench SUITE --help)")
    return parser


BENCHMARKS = {
    "maskbench": "guided.bench.maskbench",
    "json-schema-test-suite": "guided.bench.jsts",
    "serve": "guided.bench.serve",
}


def _json_arg(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None


def _engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="local HF model directory or hub name org/name (default: the embedded "
                   "random-weight model)")  # fmt: skip
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16 (default: auto)")
    p.add_argument("--max-num-seqs", type=int, default=256, help="most sequences in one step (default: 256)")
    p.add_argument("--max-model-len", type=int, help="longest prompt + output (default: the model's)")
    p.add_argument("--speculative-config", metavar="JSON", type=_json_arg,
                   help='speculative decoding, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\' '
                        "(prompt lookup) or '{\"model\": DIR, \"num_speculative_tokens\": 4}' (a draft model "
                        "with the same tokenizer); the output is the same as without it")  # fmt: skip
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, metavar="N",
                   help="split the model across N processes: spawned here, or the ranks torchrun started, "
                        "where every rank runs this same command (default: 1)")  # fmt: skip
    p.add_argument(
        "--compile-timeout", type=float, default=10.0, help="seconds per constraint compile (default: 10)"
    )
    p.add_argument(
        "--grammar-cache",
        default="auto",
        metavar="DIR|off",
        help="directory where compiled grammars persist across restarts, or 'off' "
        "(default: $GUIDED_GRAMMAR_CACHE, else grammars/ under $GUIDED_CACHE or ~/.cache/guided)",
    )
    p.add_argument(
        "--grammar-cache-mb", type=int, default=1024, help="bound on the grammar cache's size in MiB (default: 1024)"
    )


def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="start the OpenAI-compatible server")
    _engine_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    p.add_argument(
        "--served-model-name", help="the model id clients send (default: the model directory's name)"
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("GUIDED_API_KEY") or None,
        help="require 'Authorization: Bearer KEY' on every route but /health (default: $GUIDED_API_KEY)",
    )
    p.add_argument(
        "--max-queue-len",
        type=int,
        default=256,
        help="requests that may wait beyond --max-num-seqs before the server answers 503 (default: 256)",
    )
    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a request/constraint limit, e.g. body_bytes=1048576 (see guided.limits.Limits); repeatable",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds in-flight requests may finish after SIGTERM/Ctrl-C before they are aborted (default: 30)",
    )
    p.add_argument(
        "--tool-call-format",
        choices=["auto", "hermes", "llama3-json", "harmony"],
        default="auto",
        help="how the model writes tool calls (default: detected from its chat template)",
    )
    p.add_argument(
        "--reasoning-parser",
        choices=["auto", "qwen3", "deepseek_r1", "openai_gptoss", "none"],
        default="auto",
        help="a reasoning model's <think>...</think> section (gpt-oss: its analysis channel): constraints apply "
        "after it and replies carry reasoning_content (default: when the chat template has the markers)",
    )
    p.add_argument(
        "--json-open-objects",
        action="store_true",
        help="JSON Schemas keep their literal meaning: objects that leave additionalProperties unset accept "
        "members they do not declare (default: such objects are generated closed, as vLLM does; a request's "
        "json_open_objects overrides)",
    )
    p.add_argument("--log-level", default="info", help="uvicorn log level (default: info)")


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="generate one completion, optionally constrained, and print it")
    _engine_options(p)
    p.add_argument("prompt", help="the prompt text")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--schema", metavar="FILE", help="a JSON Schema file the output must be an instance of"
    )
    group.add_argument("--regex", help="a regex the output must match fully")
    group.add_argument("--grammar", metavar="FILE", help="a Lark or GBNF grammar file")
    group.add_argument("--choice", nargs="+", metavar="OPTION", help="the output is one of these strings")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--max-tokens", type=int, default=256, help="most tokens to generate (default: 256)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: 0)")
    p.add_argument("--seed", type=int, help="sampling seed")
    p.add_argument("--no-budget-aware", dest="budget_aware", action="store_false",
                   help="let max_tokens cut a constrained output (default: it ends complete within it)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "demo":
            from guided.demo import run_demo  # lazy, as every command's imports: --help starts at once

            return run_demo(args.model)
        if args.command == "vocab":
            return _vocab(args.tokenizer)
        if args.command == "serve":
            return _serve(args)
        if args.command == "generate":
            return _generate(args)
        if args.command == "warm-up":
            return _warm_up(args)
        if args.command == "bench":
            import importlib

            return importlib.import_module(BENCHMARKS[args.suite]).main(args.args)
    except (GuidedError, OSError) as e:
        print(f"guided: error: {e}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command!r}")
    return 2


def _warm_up(args) -> int:
    from guided.warmup import warm_up  # lazy, as every command's imports

    if not args.json:
        print("guided warm-up: generating under one constraint of each kind on the embedded model ...", flush=True)
    summary = warm_up(log=(lambda line: None) if args.json else (lambda line: print(line, flush=True)))
    if args.json:
        print(json.dumps(summary))
    else:
        jit = "unknown" if summary["jit_seconds"] is None else f"{summary['jit_seconds']:.1f} s"
        print(f"guided warm-up: {summary['outputs']} outputs in {summary['seconds']:.1f} s, numba's JIT {jit} "
              f"of it; its machine code is cached under {summary['numba_cache']}")  # fmt: skip
    return 0


def _llm(args):
    from guided.llm import LLM  # lazy: torch and the engine load only for commands that run a model

    config = {"device": args.device, "dtype": args.dtype, "max_num_seqs": args.max_num_seqs,
              "tensor_parallel_size": args.tensor_parallel_size, "speculative": args.speculative_config}  # fmt: skip
    if args.max_model_len is not None:
        config["max_model_len"] = args.max_model_len
    if args.grammar_cache_mb <= 0:
        raise ConfigError(f"--grammar-cache-mb must be positive, got {args.grammar_cache_mb}")
    return LLM(args.model, compile_timeout=args.compile_timeout, grammar_cache=args.grammar_cache,
               grammar_cache_bytes=args.grammar_cache_mb << 20, **config)  # fmt: skip


def _serve(args) -> int:
    import uvicorn

    # lazy: the server's stack (fastapi, the engine) loads only for `guided serve`
    from guided.server.app import create_app
    from guided.server.guards import GracefulServer

    fmt = None if args.tool_call_format == "auto" else args.tool_call_format
    llm = _llm(args)
    limits = _limits(
        args.limit, compile_timeout_s=float(args.compile_timeout), queue_len=max(args.max_queue_len, 1)
    )
    app = create_app(llm, model_name=args.served_model_name, api_key=args.api_key,
                     max_queue_len=args.max_queue_len, tool_format=fmt, limits=limits,
                     reasoning_parser=args.reasoning_parser, open_objects=args.json_open_objects)  # fmt: skip
    served = app.state.served
    auth = "API key required" if args.api_key else "no API key"
    print(f"guided: serving {served.name!r} on http://{args.host}:{args.port}/v1 "
          f"(tool-call format {served.tool_format.name}; reasoning {'/'.join(served.reasoning or ('none',))}; "
          f"JSON objects {'open' if served.open_objects else 'closed'}; {auth})", file=sys.stderr)  # fmt: skip
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level)
    GracefulServer(config, served, args.shutdown_timeout).run()
    report = served.shutdown_report or {"finished": [], "aborted": []}
    print(f"guided: shut down; in-flight requests finished: {len(report['finished'])}, "
          f"aborted: {len(report['aborted'])} {report['aborted']}", file=sys.stderr)  # fmt: skip
    return 0


def _limits(items: list[str], **defaults):
    """``Limits`` from ``NAME=VALUE`` strings over ``defaults``; a ConfigError names a bad one."""
    from dataclasses import fields

    from guided.limits import Limits  # lazy with the server it configures

    types = {f.name: f.type for f in fields(Limits)}
    values = dict(defaults)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in types:
            raise ConfigError(f"--limit {item!r}: expected NAME=VALUE with NAME one of {sorted(types)}")
        try:
            values[name] = float(value) if types[name] == "float" else int(value)
        except ValueError:
            raise ConfigError(f"--limit {item!r}: {value!r} is not a number") from None
    return Limits(**values)


def _generate(args) -> int:
    from pathlib import Path

    # lazy: the engine's modules load only for commands that generate
    from guided.constraints import Choice, Grammar, JsonSchema, Regex
    from guided.engine.sampling_params import SamplingParams

    constraint = None
    if args.schema:
        constraint = JsonSchema(Path(args.schema).read_text())
    elif args.regex is not None:
        constraint = Regex(args.regex)
    elif args.grammar:
        constraint = Grammar.from_file(args.grammar)  # a Lark grammar's relative %imports: from its folder
    elif args.choice:
        constraint = Choice(args.choice)
    llm = _llm(args)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed,
                            budget_aware=args.budget_aware)  # fmt: skip
    prompt = llm.render_chat([{"role": "user", "content": args.prompt}]) if args.chat else args.prompt
    with llm:  # (tensor-parallel workers stop at the end)
        if constraint is not None:
            llm.compile_service.compile(constraint)  # a bad schema or grammar is reported here, with where
        out = llm.generate(prompt, params, use_tqdm=False, response_format=constraint)[0]
    if out.finish_reason == "error":
        raise GuidedError(out.error or "generation failed")
    print(out.text)
    steered = ", budget steered the end" if out.outputs[0].budget_forced else ""
    print(f"[{len(out.token_ids)} tokens, finish_reason={out.finish_reason}{steered}]", file=sys.stderr)
    return 0


def _vocab(spec: str) -> int:
    # lazy: tokenizers and the grammar side load only for `guided vocab`
    from guided.builtin.tokenizers import load_tokenizer
    from guided.grammar.vocab import Vocabulary

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
