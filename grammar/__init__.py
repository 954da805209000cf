"""Grammar side: regex / grammar -> byte automata -> token-level matchers over a Vocabulary."""

from guided.grammar.compiler import GrammarCompiler
from guided.grammar.frontends.ecma_regex import parse_regex
from guided.grammar.tokens.compiled import CompiledGrammar
from guided.grammar.tokens.compiled_cfg import CfgMatcher, CompiledCfg
from guided.grammar.tokens.matcher import Matcher
from guided.grammar.vocab import Vocabulary

__all__ = ["CfgMatcher", "CompiledCfg", "CompiledGrammar", "GrammarCompiler", "Matcher", "Vocabulary", "parse_regex"]
