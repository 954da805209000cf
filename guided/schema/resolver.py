"""SchemaResolver: ``$ref`` targets by base URI, ``$id``, ``$anchor``, ``$defs``/``definitions`` and
JSON pointers, within the schema and an explicit registry of other documents.

Nothing is ever fetched: a reference to a document that is neither the schema itself nor in the
registry (``{uri: schema}``) is a ``SchemaError``.
"""

from __future__ import annotations

import json
import threading
from urllib.parse import unquote, urldefrag, urljoin

from guided.errors import SchemaError
from guided.grammar import at_rest
from guided.limits import DATA_KEYWORDS

__all__ = ["SchemaResolver", "DEFAULT_BASE", "join_uri", "escape_pointer", "shared_copies"]

DEFAULT_BASE = "https://schema.invalid/root.json"


def join_uri(base: str, ref: str) -> str:
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    if ":" in ref.split("/", 1)[0]:  # absolute (http:, urn:, tag:, ...)
        return ref
    return urljoin(base, ref)


class SchemaResolver:
    """Indexes schema resources and anchors; ``resolve(ref, base)`` gives (target, its base, its path)."""

    def __init__(self, root, registry: dict | None = None):
        self.resources: dict[str, tuple[object, str]] = {}  # uri -> (schema, json pointer path)
        self.anchors: dict[str, tuple[object, str]] = {}
        self.base_of: dict[int, str] = {}  # id(schema dict) -> its base URI
        self._registry = dict(registry or {})
        self._indexed: set[str] = set()
        self.places: dict[tuple, object] = {}  # KeyOrder.at: (id(schema), base) pairs -> their place
        self.exclusive: dict[tuple, bool] = {}  # key_order.exclusive_branches, per (id(schema), base)
        self.dynamic_refs = 0  # schema objects indexed with $dynamicRef or $recursiveRef (dynamic_refs)
        # resolve's answers by (ref, base, retry_root): a schema's $refs are resolved again at every
        # place that meets them (URI joins and splits each time); failures are not kept (their
        # messages name the place), and an answer stays true as remote documents are added
        self._resolved: dict[tuple, tuple] = {}
        self.root = root
        self.id_keys = _id_keywords(root.get("$schema") if isinstance(root, dict) else None)
        root_id = _schema_id(root, self.id_keys) if isinstance(root, dict) else None
        self.root_base = join_uri(DEFAULT_BASE, root_id) if isinstance(root_id, str) else DEFAULT_BASE
        self._index(root, self.root_base, "#")
        self.resources.setdefault(urldefrag(self.root_base)[0], (root, "#"))
        self.resources.setdefault(DEFAULT_BASE, (root, "#"))

    # ------------------------------------------------------------------ indexing
    def _index(self, schema, base: str, path: str) -> None:
        if isinstance(schema, list):
            for i, item in enumerate(schema):
                self._index(item, base, f"{path}/{i}")
            return
        if not isinstance(schema, dict):
            return
        sid = _schema_id(schema, self.id_keys)
        if isinstance(sid, str):
            if sid.startswith("#"):  # draft-07 style plain-name fragment: an anchor
                self.anchors[urldefrag(base)[0] + sid] = (schema, path)
            else:
                base = join_uri(base, sid)
                self.resources[urldefrag(base)[0]] = (schema, path)
        anchor = schema.get("$anchor")
        if isinstance(anchor, str):
            self.anchors[urldefrag(base)[0] + "#" + anchor] = (schema, path)
        anchor = schema.get("$dynamicAnchor")  # also a plain-name fragment for $ref (2020-12)
        if isinstance(anchor, str):
            self.anchors.setdefault(urldefrag(base)[0] + "#" + anchor, (schema, path))
        self.base_of[id(schema)] = base
        if "$dynamicRef" in schema or "$recursiveRef" in schema:
            self.dynamic_refs += 1
        for key, value in schema.items():
            if key not in DATA_KEYWORDS and isinstance(value, (dict, list)):
                self._index(value, base, f"{path}/{escape_pointer(key)}")

    def _load_remote(self, uri: str) -> None:
        if uri in self._indexed:
            return
        self._indexed.add(uri)
        doc = self._registry.get(uri)
        if doc is None:
            return
        self._index(doc, uri, uri + "#")
        self.resources.setdefault(uri, (doc, uri + "#"))

    # ------------------------------------------------------------------ resolution
    def followed(self, schema, base: str):
        """``schema``, or the target of its ``$ref`` (one step); None when the ``$ref`` dangles."""
        if not isinstance(schema, dict) or "$ref" not in schema:
            return schema
        try:
            return self.resolve(schema["$ref"], base, "#")[0]
        except SchemaError:
            return None

    def resolve(self, ref: str, base: str, path: str, retry_root: bool = True):
        """The target of ``ref`` seen from ``base``: (schema, base URI of the target, its path)."""
        key = (ref, base, retry_root)
        hit = self._resolved.get(key)
        if hit is None:
            hit = self._resolved[key] = self._resolve(ref, base, path, retry_root)
        return hit

    def _resolve(self, ref: str, base: str, path: str, retry_root: bool):
        uri = join_uri(base, ref)
        doc_uri, frag = urldefrag(uri)
        if doc_uri not in self.resources:
            self._load_remote(doc_uri)
        if doc_uri not in self.resources:
            raise SchemaError(
                f"$ref {ref!r} names {doc_uri!r}, which is neither this schema nor in the registry "
                "(remote references are never fetched)",
                path,
            )
        doc, doc_path = self.resources[doc_uri]
        if not frag:
            return doc, self.base_of.get(id(doc), doc_uri), doc_path
        if not frag.startswith("/"):
            hit = self.anchors.get(doc_uri + "#" + frag)
            if hit is None:
                raise SchemaError(f"$ref {ref!r}: no $anchor {frag!r} in {doc_uri}", path)
            return hit[0], self.base_of.get(id(hit[0]), doc_uri), hit[1]
        target, tpath = doc, doc_path
        for part in frag[1:].split("/"):
            key = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(target, list) and key.isdigit() and int(key) < len(target):
                target = target[int(key)]
            elif isinstance(target, dict) and key in target:
                target = target[key]
            else:
                if doc is not self.root and ref.startswith("#/") and retry_root:
                    # a same-document pointer written from the root while an `id`/`$id` inside made a
                    # new base (schemas copied into `definitions` keep theirs): what validators that
                    # ignore the inner id resolve, so it is tried against the root before failing
                    try:
                        return self.resolve(ref, self.root_base, path, retry_root=False)
                    except SchemaError:
                        pass
                raise SchemaError(f"$ref {ref!r}: JSON pointer does not resolve (no {key!r})", path)
            tpath = f"{tpath}/{escape_pointer(key)}"
        return target, self.base_of.get(id(target), doc_uri), tpath


def _id_keywords(dialect) -> tuple[str, ...]:
    """The keywords that set a base URI under the root's ``$schema``: ``id`` up to draft-04,
    ``$id`` from draft-06 on, both when ``$schema`` is absent or unknown."""
    if isinstance(dialect, str):
        if "draft-03" in dialect or "draft-04" in dialect:
            return ("id",)
        if any(d in dialect for d in ("draft-06", "draft-07", "2019-09", "2020-12")):
            return ("$id",)
    return ("$id", "id")


def _schema_id(schema: dict, keys: tuple[str, ...]):
    for key in keys:
        sid = schema.get(key)
        # a property named "id" is data; `id` beside `$ref` is the reference's, never a base
        if isinstance(sid, str) and (key == "$id" or "$ref" not in schema):
            return sid
    return None


# what ``shared_copies`` reads a key's value as, in a schema: a map of schemas, or schemas
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})
_SCHEMA_VALUES = frozenset(
    {"allOf", "anyOf", "oneOf", "prefixItems", "items", "not", "if", "then", "else", "additionalItems", "contains",
     "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "contentSchema"}
)  # fmt: skip
# annotations no pass reads (``keywords.INTERPRETED`` holds none of them), dropped from schemas
_DROPPED = frozenset({"title", "description", "$comment", "markdownDescription"})
_SCHEMA, _MAP, _OTHER = 0, 1, 2


def shared_copies(root):
    """``root`` as the lowering reads it, with its copies made one object: subschemas equal as JSON
    (member order included, ``1``, ``1.0`` and ``true`` told apart) under the same base URI become
    the first of them, so whatever is keyed by a schema's identity (the lowering's memo, its places)
    meets a copy as the schema already met. Real schemas repeat subschemas (one anonymous ``allOf``
    written in two properties; whole definitions pasted twice, often with other descriptions): each
    copy was lowered again, for an equal language.

    Annotations no pass reads (``title``, ``description``, ``$comment``, ``markdownDescription``
    with a scalar value, and ``examples``) are dropped from schemas first, so copies that differ
    only there are copies too; only in schemas: a property named ``title`` stays (``properties``
    is read as a map of schemas, and what is under an unknown keyword is kept whole). Copies only
    what changes (``root`` itself when nothing does); values of data keywords (``enum``, ``const``,
    ...) are compared as JSON and kept as they are. Base URIs follow the resolver's rules
    (``_index``), and a shared object has one base wherever it sits: an object of ``root`` met
    under two bases becomes two.

    The last results are remembered by the identity of ``root`` (a compile asks twice: for the
    run-time checks and the lowering), and a result given again is its own result."""
    if not isinstance(root, dict):
        return root
    with _SHARED_LOCK:
        hit = _SHARED.get(id(root))
        if hit is not None and hit[0] is root:
            return hit[1]
    out = _shared_copies(root)
    with _SHARED_LOCK:
        if len(_SHARED) >= 32:
            _SHARED.clear()
        _SHARED[id(root)] = (root, out)
        _SHARED[id(out)] = (out, out)
    return out


_SHARED: dict[int, tuple[dict, dict]] = {}  # id(root) -> (root, shared_copies(root)), the last few
_SHARED_LOCK = threading.Lock()
at_rest(_SHARED.clear)  # kept while compiles run only: big documents are many objects for the collector


def _shared_copies(root: dict) -> dict:
    id_keys = _id_keywords(root.get("$schema"))
    classes: dict[tuple, tuple[object, int]] = {}
    bases: dict[int, str] = {}  # id(dict met) -> the base it was first met under

    def walk(node, base: str, role: int):
        # the key: the kind, then each member's name and value key (a string stands for itself, a
        # container for its class number, another scalar for its ``_atom``); lists the same, unnamed
        keys: list = []
        news = None  # (name or index, new value) of the members that changed
        if type(node) is list:
            keys.append(0)
            for i, item in enumerate(node):
                t = type(item)
                if t is str:
                    keys.append(item)
                elif t is dict or t is list:
                    new, cid = walk(item, base, role)
                    keys.append(cid)
                    if new is not item:
                        news = news or []
                        news.append((i, new))
                else:
                    keys.append(_atom(item))
            if news is not None:
                out = list(node)
                for i, new in news:
                    out[i] = new
                node = out
        else:
            sid = _schema_id(node, id_keys)
            inner = join_uri(base, sid) if sid is not None and not sid.startswith("#") else base
            # an object the caller put under two bases (a dict built in Python, used twice) is two
            # objects here, as the resolver keeps one base per object
            copy = bases.setdefault(id(node), base) != base
            dropped = None  # the annotations left out
            keys.append(base)
            for name, value in node.items():
                t = type(value)
                container = t is dict or t is list
                if role == _SCHEMA and (name == "examples" or name in _DROPPED and not container):
                    dropped = dropped or set()
                    dropped.add(name)
                    continue
                keys.append(name)
                if name in DATA_KEYWORDS:
                    keys.append(_data(value))
                elif t is str:
                    keys.append(value)
                elif not container:
                    keys.append(_atom(value))
                else:
                    if role == _SCHEMA:
                        sub = _MAP if name in _SCHEMA_MAPS else _SCHEMA if name in _SCHEMA_VALUES else _OTHER
                        sub = _OTHER if sub == _MAP and t is not dict else sub
                    else:
                        sub = _SCHEMA if role == _MAP and t is dict else _OTHER
                    new, cid = walk(value, inner, sub)
                    keys.append(cid)
                    if new is not value:
                        news = news or {}
                        news[name] = new
            if copy or news is not None or dropped is not None:
                news, dropped = news or {}, dropped or ()
                node = {k: news.get(k, v) for k, v in node.items() if k not in dropped}
        key = tuple(keys)
        hit = classes.get(key)
        if hit is None:
            hit = classes[key] = (node, len(classes))
        return hit

    sid = _schema_id(root, id_keys)
    try:
        return walk(root, join_uri(DEFAULT_BASE, sid) if isinstance(sid, str) else DEFAULT_BASE, _SCHEMA)[0]
    finally:
        walk = None  # (a recursive closure is a reference cycle, its keys with it: left to the collector otherwise)


def _atom(value) -> tuple:
    """A JSON scalar as ``shared_copies`` compares it: by type and value (a float by its spelling:
    ``0.0`` and ``-0.0`` apart); anything unhashable is equal to nothing else."""
    if isinstance(value, float):
        return (float, repr(value))
    try:
        hash(value)
    except TypeError:
        return (id, id(value))
    return (type(value), value)


def _data(value) -> tuple:
    try:
        return ("data", json.dumps(value))
    except (TypeError, ValueError):
        return (id, id(value))


def escape_pointer(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
