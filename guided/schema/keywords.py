"""Keyword tables the schema passes share (lowering, complement), apart from the passes themselves."""

from __future__ import annotations

from guided.schema.facts import ANNOTATIONS, TYPES

__all__ = ["takes_all", "INTERPRETED", "UNSUPPORTED_KEYWORDS", "UNSUPPORTED_FORMATS", "SIMPLE_SIBLINGS",
           "ALL_TYPES", "IN_PLACE", "TYPE_KEYWORDS", "ANNOTATIONS", "OBJECT_ONLY", "OLD_DRAFTS", "MAX_ENUM"]  # fmt: skip

# keywords the lowering refuses (dynamic scopes have no static grammar): dynamic_refs rewrites the static ones
# as $ref before it, and refuses the others with their reason
UNSUPPORTED_KEYWORDS = ("$dynamicRef", "$recursiveRef")
# formats exact only where the matcher checks them (``hosts_plan``), elsewhere a SchemaError (lenient:
# relaxed to any string)
UNSUPPORTED_FORMATS = frozenset({"idn-hostname"})
# keywords the lowering interprets (the others, unknown ones included, are ignored as annotations)
INTERPRETED = frozenset(
    {"type", "enum", "const", "nullable", "$ref", "$id", "$anchor", "$dynamicRef", "$recursiveRef",
     "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "properties", "required",
     "additionalProperties", "patternProperties", "propertyNames", "minProperties", "maxProperties",
     "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties", "items",
     "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "minContains", "maxContains",
     "uniqueItems", "unevaluatedItems", "minLength", "maxLength", "pattern", "format", "minimum",
     "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)  # fmt: skip
# keywords lowered beside a schema's own ones (``applicators``, ``$ref``), not read by them
IN_PLACE = frozenset(
    {"$ref", "$anchor", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf", "not", "if", "then", "else"}
)  # fmt: skip
# keywords an enum/const may sit beside and be filtered against in Python, exactly
SIMPLE_SIBLINGS = frozenset(
    {"type", "enum", "const", "format", "minLength", "maxLength", "pattern", "minimum", "maximum",
     "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "nullable", "title", "description",
     "default", "examples", "$comment", "$schema", "$id"}
)  # fmt: skip
ALL_TYPES = frozenset(TYPES) - {"integer"}
# keywords that restrict instances of one type only (others pass them)
TYPE_KEYWORDS = frozenset(
    {"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
     "maxProperties", "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties",
     "items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "minContains",
     "maxContains", "uniqueItems", "unevaluatedItems", "minLength", "maxLength", "pattern", "format",
     "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)  # fmt: skip


def takes_all(schema) -> bool:
    """True, {} or annotations only: every value is an instance."""
    return schema is True or isinstance(schema, dict) and set(schema) <= ANNOTATIONS

# keywords that only concern objects
OBJECT_ONLY = frozenset(
    {"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
     "maxProperties", "dependentRequired"}
)  # fmt: skip
OLD_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")
MAX_ENUM = 10_000
