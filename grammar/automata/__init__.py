"""IR -> lazy byte automata: interned expressions (``expr_pool``) with derivatives, emptiness and
derivative classes; the lazy DFA of a regular language (``lazy_dfa``); the Earley automaton over
lexemes of a context-free grammar (``earley``); the work bound every lazy step runs under."""
