"""Grammar side: regex / grammar -> byte automata -> token-level matchers over a Vocabulary."""

from .cfg_matcher import CfgMatcher, CompiledCfg
from .compiled import CompiledGrammar
from .compiler import GrammarCompiler
from .matcher import Matcher
from .regex_parser import parse_regex
from .vocab import Vocabulary

__all__ = ["CfgMatcher", "CompiledCfg", "CompiledGrammar", "GrammarCompiler", "Matcher", "Vocabulary", "parse_regex"]
