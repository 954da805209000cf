"""JSON Schema -> regex AST -> compiled grammar: the public entry points.

``json_schema_to_node(schema, **options)`` lowers a JSON Schema (a dict, a JSON string, or a
pydantic model class; draft 2020-12 and draft-07, as pydantic v2 writes them) to one regex AST node
whose language is exactly the schema's instances as generated, or raises ``SchemaError`` naming the
keyword and its JSON pointer. ``compile_json_schema(compiler, schema, **options)`` hands that node
to the grammar compiler, cached under the canonical JSON of (schema, options).

Output policy
-------------
* Whitespace: "flexible" (default) allows up to ``max_ws`` (default 8) of space, tab, CR, LF after
  ``{ [ , :`` and before ``} ] , :``; "compact" allows none. Never before or after the root value,
  so a model cannot loop on whitespace.
* Key order: properties are generated in declared order (``properties`` order, merged in document
  order over the schemas that apply at the same place, then names only ``required`` lists); other
  properties (``patternProperties``, ``additionalProperties``) follow them. An instance listing
  declared properties in another order is not in the language (see ``guided.key_order``).
* Strings: the canonical JSON spelling of each character (``json.dumps(..., ensure_ascii=False)``).
* Numbers: integers as ``-?(0|[1-9][0-9]*)`` (``1.0`` allowed from draft-06 on, as JSON Schema
  counts it an integer); bounded numbers (and ``multipleOf``) as plain decimals without an exponent.
* Schema-free values (``true``, ``{}``, ``additionalProperties`` left open) nest at most
  ``any_depth`` (default 10) arrays/objects deep; recursive ``$ref`` cycles are an error unless
  ``max_depth`` unrolls them. Both only narrow what is generated: output is always valid.
* ``format`` is asserted (as MaskBench and the test suite's ``optional/format`` expect), following
  the RFC grammars (see ``guided.json_formats``).
"""

from __future__ import annotations

import json
from typing import Any

from guided.errors import SchemaError
from guided.grammar.regex_ast import EMPTY, Node
from guided.schema_lowering import SchemaLowering
from guided.schema_options import SchemaOptions

__all__ = ["json_schema_to_node", "compile_json_schema", "schema_dict", "cache_key", "SchemaOptions"]


def schema_dict(schema: Any) -> dict | bool:
    """A schema as a dict: from a dict/bool, a JSON string, or a pydantic model class."""
    if isinstance(schema, (dict, bool)):
        return schema
    if isinstance(schema, (str, bytes)):
        try:
            value = json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"the schema is not valid JSON: {e}") from e
        if not isinstance(value, (dict, bool)):
            raise SchemaError("a JSON Schema must be an object or a boolean")
        return value
    if hasattr(schema, "model_json_schema"):
        from guided.pydantic_support import json_schema_for

        return json_schema_for(schema)
    raise SchemaError(f"not a JSON Schema: {type(schema).__name__}")


def json_schema_to_node(schema: Any, *, registry: dict | None = None, **options) -> Node:
    """The regex AST of a JSON Schema's instances.

    Parameters
    ----------
    schema : dict, bool, str or pydantic model class
    registry : dict, optional
        ``{uri: schema}`` for remote ``$ref`` targets; nothing is ever fetched.
    **options
        ``SchemaOptions`` fields: strict, lenient, whitespace, max_ws, max_depth, any_depth,
        max_nodes, timeout_s.

    Raises
    ------
    SchemaError
        A keyword cannot be enforced exactly (unless ``lenient``), or the schema is malformed or
        accepts nothing.
    LimitError, CompileTimeoutError
        The lowering exceeded its size or time bound.
    """
    opts = options.pop("options", None) or SchemaOptions(**options)
    node = SchemaLowering(schema_dict(schema), opts, registry).lower_root()
    if node == EMPTY:
        raise SchemaError("the schema accepts no instance")
    return node


def cache_key(schema: Any, options: SchemaOptions, registry: dict | None = None) -> str:
    """The canonical JSON of (schema, options, registry): equal keys compile to equal grammars."""
    return json.dumps([schema_dict(schema), options.key(), registry or {}], sort_keys=True, ensure_ascii=False)


def compile_json_schema(compiler, schema: Any, *, registry: dict | None = None, **options):
    """Compile a JSON Schema with a ``GrammarCompiler``, cached per (schema, options, registry)."""
    opts = SchemaOptions(**options)
    node = json_schema_to_node(schema, registry=registry, options=opts)
    return compiler.compile_ast(node, key=("json-schema", cache_key(schema, opts, registry)))
