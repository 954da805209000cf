"""Text -> IR: ECMA-262 regexes (JSON Schema ``pattern``), Python regexes (Lark terminals), Lark and
GBNF grammars. Each turns its syntax into ``regex_ast`` nodes or a ``CfgGrammar``, or raises
``GrammarError`` naming the line and column."""
