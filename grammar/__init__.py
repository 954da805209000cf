"""Grammar side: regex / grammar -> byte automata -> token-level matchers over a Vocabulary."""

from .compiled import CompiledGrammar
from .compiler import GrammarCompiler
from .matcher import Matcher
from .regex_parser import parse_regex
from .vocab import Vocabulary

__all__ = ["CompiledGrammar", "GrammarCompiler", "Matcher", "Vocabulary", "parse_regex"]
