"""Automata x vocabulary -> token masks: the vocabulary's byte trie and its slices (``vocab_index``),
the compiled regular and context-free grammars with their per-sequence matchers, forced tokens."""
