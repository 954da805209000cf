"""Grammar side: regex / grammar -> byte automata -> token-level matchers over a Vocabulary."""
