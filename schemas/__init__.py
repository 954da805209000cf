"""JSON Schemas the project ships (``demo/`` for ``guided demo``), as package data: read them with
``importlib.resources.files("guided.schema_files")``."""
