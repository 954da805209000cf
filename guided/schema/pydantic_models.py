"""pydantic models as constraints: their JSON Schema in, validated instances out.

``json_schema_for(Model)`` is pydantic v2's validation-mode schema (``$defs`` and ``$ref`` as pydantic
writes them; draft 2020-12). ``parse_output(Model_or_schema, text)`` parses generated text back:
into a validated model instance for a model class, or into JSON validated against a schema dict.
"""

from __future__ import annotations

import json
from typing import Any

from guided.errors import SchemaError

__all__ = ["json_schema_for", "parse_output", "is_model"]


def is_model(obj: Any) -> bool:
    return isinstance(obj, type) and hasattr(obj, "model_json_schema") and hasattr(obj, "model_validate_json")


def json_schema_for(model: Any) -> dict:
    """The JSON Schema of a pydantic v2 model class (or a TypeAdapter-able type)."""
    if is_model(model):
        return model.model_json_schema(mode="validation")
    try:
        from pydantic import TypeAdapter
    except ImportError as e:  # pragma: no cover - pydantic is a dependency
        raise SchemaError("pydantic is needed for model classes: pip install pydantic") from e
    try:
        return TypeAdapter(model).json_schema(mode="validation")
    except Exception as e:
        raise SchemaError(f"cannot build a JSON Schema for {model!r}: {e}") from e


def parse_output(model_or_schema: Any, text: str):
    """Generated text -> a validated pydantic instance (model class) or JSON value (schema).

    Raises ``SchemaError`` naming the first violation when the text does not validate.
    """
    if is_model(model_or_schema):
        from pydantic import ValidationError

        try:
            return model_or_schema.model_validate_json(text)
        except ValidationError as e:
            raise SchemaError(f"output does not validate against {model_or_schema.__name__}: {e}") from e
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"output is not JSON: {e}") from e
    if model_or_schema is not None:
        import jsonschema

        schema = model_or_schema if isinstance(model_or_schema, (dict, bool)) else json.loads(model_or_schema)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        error = jsonschema.exceptions.best_match(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
        if error is not None:
            path = "#" + "".join(f"/{p}" for p in error.absolute_path)
            raise SchemaError(f"output does not validate: {error.message}", path)
    return value
