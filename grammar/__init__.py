"""Grammar side: regex / grammar -> byte automata -> token-level matchers over a Vocabulary.

The public face: ``GrammarCompiler`` (constraint -> compiled grammar), ``Vocabulary``, the compiled
grammars and their ``Matcher``s (and their shortest completions: ``Completion``, ``spell``), the regex front end, and what compilers that lower to the IR
(``regex_ast``, ``cfg_ir``) need: ``ExprPool`` for exact membership and ``intern_common``; ``quiet_collector`` for
whatever else compiles (the cyclic garbage collector held off) and ``at_rest`` for what compiles share only
while they run; ``numba_cache_dir`` (where the mask code's machine code is cached). Inside:
``frontends/`` (text -> IR), ``automata/`` (IR -> lazy byte automata), ``tokens/`` (automata x
vocabulary -> masks); ``languages`` answers questions about regex languages at compile time.
"""

from guided.grammar import numba_cache  # noqa: F401 - first: its cache locators precede every compiled function
from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool, intern_common
from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.collector import at_rest, quiet_collector
from guided.grammar.compiler import GrammarCompiler
from guided.grammar.frontends.ecma_regex import parse_regex
from guided.grammar.numba_cache import cache_dir as numba_cache_dir
from guided.grammar.tokens.compiled import CompiledGrammar
from guided.grammar.tokens.compiled_cfg import CfgMatcher, CompiledCfg
from guided.grammar.tokens.completion import Completion, byte_of_class, spell
from guided.grammar.tokens.matcher import Matcher
from guided.grammar.vocab import Vocabulary

__all__ = [
    "EMPTY_ID",
    "BoundedCache",
    "CfgMatcher",
    "CompiledCfg",
    "CompiledGrammar",
    "Completion",
    "ExprPool",
    "GrammarCompiler",
    "Matcher",
    "Vocabulary",
    "byte_of_class",
    "intern_common",
    "numba_cache_dir",
    "parse_regex",
    "quiet_collector",
    "at_rest",
    "spell",
]
