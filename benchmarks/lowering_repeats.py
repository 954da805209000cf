"""How much JSON Schema lowering time goes to lowering a subschema again to a language already built.

The lowering memoises each subschema per (schema, base, place, mode) (``SchemaLowering.lower``); the
place's part of the key is the identity of the schemas with ordering keywords that apply there
(``KeyOrder.key``). A schema met at two places whose keys differ is lowered twice, and when both
lowerings build only nodes the lowering already holds (``SchemaLowering.canon`` gains nothing), the
second was spent for an equal result. This script measures that time per schema (the outermost such
lowerings, nested ones not counted twice) and says why the memo missed:

* ``copy``: this schema object was not lowered before, but one equal to it as JSON was, with the
  same base and mode, at a place whose keyed schemas are equal as JSON (two copies of one anonymous
  ``allOf`` in two properties);
* ``twin``: the schema was lowered before at a place that differs only in schemas equal as JSON
  but distinct as objects;
* ``place``: the schema was lowered before at a place holding different schemas (the result
  happened to be equal);
* ``other``: none of these: an equal result came from another schema (one differing in annotations,
  or met at a place with other schemas).

Since ``resolver.shared_copies`` makes subschemas equal as JSON (annotations aside) one object before
the lowering, ``copy`` counts what that leaves: copies the lowering itself writes (merges, complements)
and copies under other base URIs.

A diagnostic of where a finer memo key would save time, not a benchmark of a change: the lowering
runs with a timing wrapper around ``lower`` (~10-20% slower than without).

    python benchmarks/lowering_repeats.py ../shared/data/maskbench-hard \\
        --tokenizer ../shared/tokenizers/llama3/tokenizer.model --files WashingtonPost---wp_7_Normalized.json

``--from-results R.json.gz --band 100 130`` takes the schemas whose TTFM in a ``maskbench.py`` results
file lies in that band (ms), looked up in the data folders given.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import time
import warnings
from pathlib import Path

from guided.bench.engines import make_engine
from guided.bench.maskbench import warm_up
from guided.builtin.tokenizers import load_tokenizer
from guided.schema import key_order
from guided.schema.lowering import SchemaLowering


def _files(args) -> list[Path]:
    folders = [Path(d) for d in args.data]
    names = list(args.files or [])
    if args.from_results:
        lo, hi = args.band
        with gzip.open(args.from_results, "rt") if args.from_results.endswith(".gz") else open(args.from_results) as f:
            lines = json.load(f)["lines"]["guided"]
        names += [ln["file"] for ln in lines if ln.get("ttfm_us") and lo <= ln["ttfm_us"] / 1e3 < hi]
    out = []
    for name in names:
        hit = next((d / name for d in folders if (d / name).exists()), None)
        if hit is None:
            raise SystemExit(f"{name}: not in {', '.join(map(str, folders))}")
        out.append(hit)
    return out


class Repeats:
    """Wraps ``SchemaLowering.lower`` to time the lowerings that add no canonical node."""

    def __init__(self, min_s: float = 20e-6):
        self.min_s = min_s  # lowerings shorter than this are not counted (memo hits, leaves)
        self.spans: list[tuple[float, float, str]] = []
        self.seen: dict[tuple, list[tuple]] = collections.defaultdict(list)  # partial key -> place keys
        self.dicts: dict[int, dict] = {}
        self.texts: set[tuple] = set()  # (JSON, base, mode, closes, JSON of the place) of schemas lowered
        self.json_of: dict[int, tuple[dict, str]] = {}

    def install(self):
        lower = SchemaLowering.lower
        me = self

        def timed(low, schema, path, base, place):
            t0 = time.perf_counter()
            before = len(low.canon)
            node = lower(low, schema, path, base, place)
            t1 = time.perf_counter()
            if isinstance(schema, dict) and place is not None:
                keyed = [s for s, _ in place.schemas if not key_order._ORDER_KEYS.isdisjoint(s)]
                for s in keyed:
                    me.dicts[id(s)] = s
                pkey = tuple(id(s) for s in keyed)
                partial = (id(schema), low.resolver.base_of.get(id(schema), base), low.mode, low.closes_objects)
                earlier = me.seen[partial]
                text = (me._json(schema), partial[1:], tuple(me._json(d) for d in keyed))
                if len(low.canon) == before and t1 - t0 > me.min_s and pkey not in earlier:
                    why = me._why(pkey, earlier)
                    me.spans.append((t0, t1, "copy" if why == "other" and text in me.texts else why))
                me.texts.add(text)
                if pkey not in earlier:
                    earlier.append(pkey)
            return node

        SchemaLowering.lower = timed
        return lower

    def _json(self, schema: dict) -> str:
        hit = self.json_of.get(id(schema))
        if hit is None or hit[0] is not schema:
            hit = self.json_of[id(schema)] = (schema, json.dumps(schema))
        return hit[1]

    def _why(self, pkey: tuple, earlier: list[tuple]) -> str:
        if not earlier:
            return "other"
        for k in earlier:
            if len(k) == len(pkey) and all(
                a == b or self._json(self.dicts[a]) == self._json(self.dicts[b]) for a, b in zip(k, pkey, strict=True)
            ):
                return "twin"
        return "place"

    def take(self) -> dict[str, float]:
        """Seconds per cause since the last call (outermost spans only), and clears."""
        out: dict[str, float] = collections.Counter()
        end = -1.0
        for a, b, why in sorted(self.spans):
            if a >= end:
                out[why] += b - a
                end = b
        self.spans.clear()
        self.seen.clear()
        self.dicts.clear()
        self.texts.clear()
        self.json_of.clear()
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data", nargs="+", help="folders holding the MaskBench files")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--files", nargs="*", help="file names inside the folders")
    p.add_argument("--from-results", help="a maskbench.py results file (.json or .json.gz)")
    p.add_argument("--band", nargs=2, type=float, default=(100.0, 130.0), metavar=("LO_MS", "HI_MS"))
    args = p.parse_args()
    warnings.simplefilter("ignore")
    engine = make_engine("guided", load_tokenizer(args.tokenizer), key_order="any")
    warm_up(engine)
    rep = Repeats()
    rep.install()
    total = collections.Counter()
    causes = ("copy", "twin", "place", "other")
    print(f"{'schema':48s} {'compile ms':>10s} " + " ".join(f"{c + ' ms':>9s}" for c in causes))
    for path in _files(args):
        schema = json.loads(path.read_text())["schema"]
        rep.take()
        t0 = time.perf_counter()
        try:
            engine.compile(schema)
        except Exception as e:  # a schema that fails to compile is reported, not timed
            print(f"{path.name:48s} error: {type(e).__name__}")
            continue
        dt = time.perf_counter() - t0
        got = rep.take()
        total["compile"] += dt
        for c in causes:
            total[c] += got.get(c, 0.0)
        print(f"{path.name[:48]:48s} {dt * 1e3:10.1f} " + " ".join(f"{got.get(c, 0.0) * 1e3:9.1f}" for c in causes))
    if total["compile"]:
        share = {c: f"{100 * total[c] / total['compile']:.1f}%" for c in causes}
        print(f"total compile {total['compile'] * 1e3:.0f} ms; lowered again to known results: {share}")


if __name__ == "__main__":
    main()
