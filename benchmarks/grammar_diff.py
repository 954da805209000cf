"""Whether two versions of guided lower the same schemas to the same grammars.

A refactor of the JSON Schema lowering that should not change what it builds (a faster conversion,
a memo) is checked here: each version, laid out from ``git archive REF`` in its own worker (see
``compile_ab.py``), lowers every selected MaskBench schema with ``json_schema_to_grammar`` and
reports a digest of the result: for a context-free grammar its rules, its terminals and their
regex ASTs, in order; for a regular one its AST. The digest numbers AST nodes by structure, so it
does not depend on the hash seed or on which objects are shared. Prints the schemas whose digests
differ (or whose errors differ). It times nothing: in a fresh checkout the compiled core is
JIT-compiled at its first uses, inside whichever schema needs it (``compile_ab.py`` times).

    python benchmarks/grammar_diff.py f8bcd58 HEAD --every 8 --key-order any

With ``--masks`` it compares what the compiled grammars do instead: each version compiles the
schema as MaskBench does (``key_order`` any) and replays its test instances, and the digest covers
every token mask filled on the way and the verdicts: the check for a change to the mask walk or the
automata that should not change a single allowed token.

    python benchmarks/grammar_diff.py a9b6476 HEAD --every 16 --masks

A ref is anything ``git archive`` takes: commit a change to check it.
"""

from __future__ import annotations

import sys

from compile_ab import SHARED, paired_parser, run_paired, selected

WORKER = r"""
import hashlib, json, sys, warnings
warnings.simplefilter("ignore")
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar import regex_ast
from guided.grammar.regex_ast import And, Alt, ByteSet, Chars, Not, Repeat, Seq
Recursive = getattr(regex_ast, "Recursive", None)  # (versions before it: none)
from guided.schema.compiler import json_schema_to_grammar

def canon(nodes):
    num, table, rows = {}, {}, []
    for root in nodes:
        stack = [(root, False)]
        while stack:
            x, expanded = stack.pop()
            if id(x) in num:
                continue
            c = x.__class__
            # a Cofinite union (and a TrieLeft, whose items are built when read) by its items and body
            cofinite = c is not Alt and isinstance(x, Alt)
            kids = (*x.items, x.body) if cofinite else x.items if c in (Seq, Alt, And) else (x.item,) if c in (Repeat, Not) else ()
            if kids and not expanded:
                stack.append((x, True))
                stack.extend((k, False) for k in kids)
                continue
            if c in (Chars, ByteSet):
                key = (c.__name__, x.ranges)
            elif c is Recursive:  # by its definition (its body holds the leaf itself)
                key = ("Recursive", repr(canon(x.definition)))
            elif c is Repeat:
                key = ("Repeat", num[id(x.item)], x.min, x.max)
            else:
                key = ("Cofinite" if cofinite else c.__name__, tuple(num[id(k)] for k in kids))
            if key not in table:
                table[key] = len(rows)
                rows.append(key)
            num[id(x)] = table[key]
    return [num[id(n)] for n in nodes], rows

def digest(g):
    h = hashlib.sha256()
    if isinstance(g, CfgGrammar):
        h.update(repr([(r.name, r.alternatives, r.priority) for r in g.rules.values()]).encode())
        refs, rows = canon([t.node for t in g.terminals.values()])
        h.update(repr([(t.name, r, t.priority) for t, r in zip(g.terminals.values(), refs)]).encode())
        h.update(repr((rows, g.start, g.ignore)).encode())
        return "cfg:" + h.hexdigest()[:20]
    h.update(repr(canon([g])).encode())
    return "regular:" + h.hexdigest()[:20]

key_order = sys.argv[1]
json_schema_to_grammar({"type": "object"})
print("ready", flush=True)
for line in sys.stdin:
    schema = json.loads(open(line.strip()).read())["schema"]
    try:
        out = digest(json_schema_to_grammar(schema, key_order=key_order))
    except Exception as e:
        out = f"error: {type(e).__name__}: {str(e)[:120]}"
    print(json.dumps([out]), flush=True)
"""

MASKS = r"""
import hashlib, json, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from guided.bench.engines import make_engine
from guided.bench.maskbench import check_tests, warm_up
from guided.builtin.tokenizers import load_tokenizer

tokenizer = load_tokenizer(sys.argv[1])
engine = make_engine("guided", tokenizer, key_order="any")
warm_up(engine)
seen = hashlib.sha256()

def check(compiled, tokens):  # the engine's check, hashing each mask it fills
    m, row = compiled.matcher(), engine.bitmask
    for t in tokens:
        m.fill_bitmask(row, 0)
        seen.update(row.tobytes())
        if not ((int(row[0][t >> 5]) >> (t & 31)) & 1 and m.accept_token(t)):
            return False, False, [0.0]
    return True, m.is_accepting(), [0.0]

engine.check = check
print("ready", flush=True)
for line in sys.stdin:
    doc = json.loads(open(line.strip()).read())
    seen = hashlib.sha256()
    try:
        r = check_tests(engine, tokenizer, engine.compile(doc["schema"]), doc["tests"])
        out = f"masks:{seen.hexdigest()[:20]} rejects_valid {r['rejects_valid']} accepts_invalid {r['accepts_invalid']}"
    except Exception as e:
        out = f"error: {type(e).__name__}: {str(e)[:120]}"
    print(json.dumps([out]), flush=True)
"""


def main() -> None:
    p = paired_parser(__doc__.split("\n")[0], every=8)
    p.add_argument("--key-order", default="any", choices=["declared", "any"])
    p.add_argument("--masks", action="store_true", help="compare every mask along the test instances instead")
    p.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "llama3"), help="for --masks")
    args = p.parse_args()
    files = selected(args)
    code = [MASKS, args.tokenizer] if args.masks else [WORKER, args.key_order]
    a, b = run_paired((args.a, args.b), code, files)
    differ = [f.name for f in files if a[f.name][0] != b[f.name][0]]
    what = "masks" if args.masks else "grammars"
    if args.masks:
        errors = sum(v[0].startswith("error") for v in a.values())
        print(f"{len(files)} schemas replayed (key_order any; A: {errors} errors); A = {args.a}, B = {args.b}")
    else:
        kinds = {k: sum(v[0].startswith(k) for v in a.values()) for k in ("cfg", "regular", "error")}
        print(f"{len(files)} schemas (key_order {args.key_order}; A: {kinds['cfg']} context-free, "
              f"{kinds['regular']} regular, {kinds['error']} errors); A = {args.a}, B = {args.b}")  # fmt: skip
    print(f"  {what} that differ: {len(differ)}")
    for name in differ:
        print(f"    {name}: A {a[name][0]} | B {b[name][0]}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
