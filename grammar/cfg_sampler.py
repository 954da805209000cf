"""Random sentences of a CfgGrammar (for tests and benchmarks), and regex AST -> Python ``re`` text.

``CfgSampler(grammar, seed).sentence(max_depth)`` expands rules at random; past ``max_depth`` it takes
the alternative that bottoms out soonest, so every sentence is finite. Terminals are sampled from their
regex (bounded repetition counts); ignorable terminals are inserted between lexemes now and then.
"""

from __future__ import annotations

import random

from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.regex_ast import Alt, ByteSet, Chars, Node, Repeat, Seq

__all__ = ["CfgSampler", "sample_regex", "to_python_regex"]


class CfgSampler:
    def __init__(self, grammar: CfgGrammar, seed: int = 0, ignore_rate: float = 0.2, ascii_bias: float = 0.8):
        self.g = grammar
        self.rng = random.Random(seed)
        self.ignore_rate = ignore_rate
        self.ascii_bias = ascii_bias
        self.height = self._heights()

    def _heights(self) -> dict[str, int]:
        """Minimal derivation height of each symbol (terminals 0)."""
        h = {n: 0 for n in self.g.terminals}
        changed = True
        while changed:
            changed = False
            for r in self.g.rules.values():
                for a in r.alternatives:
                    if all(s in h for s in a):
                        v = 1 + max((h[s] for s in a), default=0)
                        if v < h.get(r.name, 1 << 30):
                            h[r.name] = v
                            changed = True
        return h

    def sentence(self, max_depth: int = 8, max_len: int = 400) -> str:
        out: list[str] = []
        self._ignore(out)
        self._expand(self.g.start, max_depth, out, max_len)
        return "".join(out)

    def _expand(self, sym: str, depth: int, out: list[str], max_len: int) -> None:
        if sym in self.g.terminals:
            out.append(sample_regex(self.g.terminals[sym].node, self.rng, self.ascii_bias))
            self._ignore(out)
            return
        alts = self.g.rules[sym].alternatives
        if depth <= 0 or sum(map(len, out)) > max_len:
            best = min(max((self.height[s] for s in a), default=0) for a in alts)
            alts = [a for a in alts if max((self.height[s] for s in a), default=0) == best]
        for s in self.rng.choice(alts):
            self._expand(s, depth - 1, out, max_len)

    def _ignore(self, out: list[str]) -> None:
        if self.g.ignore and self.rng.random() < self.ignore_rate:
            name = self.rng.choice(self.g.ignore)
            out.append(sample_regex(self.g.terminals[name].node, self.rng, self.ascii_bias))


def sample_regex(node: Node, rng: random.Random, ascii_bias: float = 0.8, extra: int = 3) -> str:
    """A random string of the regex's language (And/Not/ByteSet are not sampled)."""
    if isinstance(node, Chars):
        ranges = node.ranges
        small = [(lo, min(hi, 0x7E)) for lo, hi in ranges if lo <= 0x7E and max(lo, 0x20) <= min(hi, 0x7E)]
        if small and rng.random() < ascii_bias:
            lo, hi = rng.choice(small)
            return chr(rng.randint(max(lo, 0x20), hi))
        while True:
            lo, hi = rng.choice(ranges)
            cp = rng.randint(lo, hi)
            if not 0xD800 <= cp <= 0xDFFF:
                return chr(cp)
    if isinstance(node, Seq):
        return "".join(sample_regex(x, rng, ascii_bias, extra) for x in node.items)
    if isinstance(node, Alt):
        return sample_regex(rng.choice(node.items), rng, ascii_bias, extra)
    if isinstance(node, Repeat):
        hi = node.min + extra if node.max is None else min(node.max, node.min + extra)
        return "".join(
            sample_regex(node.item, rng, ascii_bias, extra) for _ in range(rng.randint(node.min, hi))
        )
    raise TypeError(f"cannot sample {type(node).__name__}")


def to_python_regex(node: Node) -> str:
    """Python ``re`` text for a regex AST without And/Not/ByteSet (full-match semantics)."""
    if isinstance(node, Chars):
        if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            return _esc(node.ranges[0][0])
        return (
            "[" + "".join(_esc(lo) if lo == hi else f"{_esc(lo)}-{_esc(hi)}" for lo, hi in node.ranges) + "]"
        )
    if isinstance(node, Seq):
        return "".join(f"(?:{to_python_regex(x)})" for x in node.items)
    if isinstance(node, Alt):
        return "(?:" + "|".join(to_python_regex(x) for x in node.items) + ")" if node.items else "[^\\s\\S]"
    if isinstance(node, Repeat):
        hi = "" if node.max is None else node.max
        return f"(?:{to_python_regex(node.item)}){{{node.min},{hi}}}"
    if isinstance(node, ByteSet):
        raise TypeError("raw byte sets have no Python str regex")
    raise TypeError(f"cannot print {type(node).__name__}")


def _esc(cp: int) -> str:
    return f"\\U{cp:08x}" if cp > 0xFFFF else f"\\u{cp:04x}"
