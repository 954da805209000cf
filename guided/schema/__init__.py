"""JSON Schema and pydantic -> regex AST or CfgGrammar, compiled against a vocabulary.

The passes, in order: ``shapes`` (malformed keywords are errors), ``resolver`` (``$ref``), ``merge``
(``allOf`` and sibling keywords), ``lowering`` (a schema's instances as a regex AST, with the value
modules ``numbers`` / ``strings`` / ``arrays`` / ``objects`` / ``formats`` and ``key_order``),
``complement`` (``not``, ``oneOf`` exclusivity, ``if``/``else``), ``intersections`` and ``recursion``
(holes for recursive references and schema-free values, turned into a context-free grammar).
``compiler`` runs them; ``keywords`` holds the tables several passes read.
"""

from guided.schema.compiler import compile_json_schema, json_schema_to_grammar, json_schema_to_node
from guided.schema.options import SchemaOptions
from guided.schema.pydantic_models import json_schema_for, parse_output

__all__ = [
    "SchemaOptions",
    "compile_json_schema",
    "json_schema_for",
    "json_schema_to_grammar",
    "json_schema_to_node",
    "parse_output",
]
