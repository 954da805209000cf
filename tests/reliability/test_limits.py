"""Limits: each one configurable, each violation a clear error naming the limit and where."""

from __future__ import annotations

import json

import httpx
import pytest

from guided.compile_service import CompileService
from guided.constraints import Choice, Grammar, JsonSchema, Regex
from guided.errors import ConfigError, LimitError, SchemaError
from guided.limits import LIMIT_DOCS, Limits, check_schema
from guided.schema.compiler import json_schema_to_node
from guided.tool_calls import ToolCalls


def test_every_limit_is_documented_and_checked():
    assert set(LIMIT_DOCS) == set(Limits.__dataclass_fields__)
    for name in LIMIT_DOCS:
        for bad in (0, -1, "3", True, float("inf")):
            with pytest.raises(ConfigError, match=name):
                Limits(**{name: bad})
    with pytest.raises(ConfigError, match="schema_depth"):
        Limits(schema_depth=2.5)  # counts are integers


def _nested(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


SMALL = Limits(schema_bytes=2000, schema_nodes=300, schema_depth=12, enum_values=5, min_count=100,
               max_count=10**6, regex_bytes=20)  # fmt: skip


@pytest.mark.parametrize(
    "schema, limit, where",
    [
        (_nested(20), "schema_depth", "#/items/items/items/items/items"),
        ({"enum": list(range(6))}, "enum_values", "#/enum"),
        (
            {"properties": {"a": {"type": "string", "minLength": 101}}},
            "min_count",
            "#/properties/a/minLength",
        ),
        ({"type": "array", "maxItems": 10**7}, "max_count", "#/maxItems"),
        ({"properties": {"p/q": {"pattern": "a" * 21}}}, "regex_bytes", "#/properties/p~1q/pattern"),
        ({"patternProperties": {"b" * 21: {}}}, "regex_bytes", "#/patternProperties/" + "b" * 21),
        (
            {"allOf": [{}] * 400},
            "schema_nodes",
            "#/allOf/",
        ),
        ({"description": "x" * 3000}, "schema_bytes", "#"),
    ],
    ids=["depth", "enum", "min_count", "max_count", "pattern", "patternProperties", "nodes", "bytes"],
)
def test_schema_limits_name_the_limit_and_pointer(schema, limit, where):
    with pytest.raises(LimitError) as e:
        check_schema(schema, SMALL)
    message = str(e.value)
    assert f"Limits.{limit}" in message and f"at {where}" in message, message
    with pytest.raises(LimitError, match=limit):  # the compiler's entry runs the same pre-pass
        json_schema_to_node(schema, limits=SMALL)


def test_schema_limits_admit_data_and_ordinary_schemas():
    check_schema({"const": {"minLength": 10**9, "enum": list(range(50))}}, SMALL)  # values are data
    check_schema({"type": "string", "maxLength": 10**6, "enum": ["a"] * 5}, SMALL)
    check_schema(_nested(10), SMALL)


def test_deep_schema_is_a_limit_error_not_a_crash():
    with pytest.raises(LimitError, match="schema_depth"):
        json_schema_to_node(_nested(5000))  # iterative pre-pass: no RecursionError


@pytest.fixture(scope="module")
def service(vocab_builtin):
    limits = Limits(regex_bytes=50, grammar_bytes=100, choice_options=3, enum_values=4, compile_timeout_s=5.0)
    svc = CompileService(vocab_builtin, limits=limits)
    yield svc
    svc.shutdown()


@pytest.mark.parametrize(
    "constraint, limit",
    [
        (Regex("a" * 51), "regex_bytes"),
        (Grammar('start: "' + "a" * 100 + '"'), "grammar_bytes"),
        (Choice(["a", "b", "c", "d"]), "choice_options"),
        (Choice(["x" * 101]), "grammar_bytes"),
        (JsonSchema({"enum": [1, 2, 3, 4, 5]}), "enum_values"),
        (ToolCalls((("pick", '{"type":"object","properties":{"x":{"enum":[1,2,3,4,5]}}}', False),)), "enum_values"),
    ],
    ids=["regex", "grammar", "choice-count", "choice-size", "schema-enum", "tool-parameters"],
)
def test_compile_service_limits(service, constraint, limit):
    assert service.timeout_s == 5.0
    with pytest.raises(LimitError, match=f"Limits.{limit}"):
        service.compile(constraint)


def test_within_limits_compiles(service):
    assert service.compile(Choice(["a", "b"])).matcher() is not None
    tool = ToolCalls((("pick", '{"type":"object","properties":{"x":{"enum":[1,2]}}}', False),))
    assert service.compile(tool).matcher() is not None
    assert service.compile(JsonSchema({"enum": [1, 2]})).matcher() is not None


@pytest.mark.parametrize(
    "ref",
    ["file:///etc/passwd", "http://127.0.0.1:9/schema.json", "https://example.com/s.json#/x", "other.json"],
)
def test_refs_never_read_files_or_network(ref):
    with pytest.raises(SchemaError, match="never fetched"):
        json_schema_to_node({"$ref": ref})


def test_refs_resolve_from_an_explicit_registry():
    registry = {"https://example.com/s.json": {"$defs": {"x": {"enum": ["ok"]}}}}
    node = json_schema_to_node({"$ref": "https://example.com/s.json#/$defs/x"}, registry=registry)
    assert node == json_schema_to_node({"enum": ["ok"]})


# ---------------------------------------------------------------------- server
KEY = "s3cret-key"
LIMITS = Limits(
    body_bytes=4000, max_tokens=50, n=2, tools=1, stop_strings=2, regex_bytes=1000, compile_timeout_s=5.0
)
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def base():
    from load_lib import serve

    with serve(api_key=KEY, limits=LIMITS) as (_, url):
        yield url


def post(base, body=None, key=KEY, content=None, path="/v1/chat/completions", headers=None):
    headers = {**(headers or {}), **({"Authorization": f"Bearer {key}"} if key is not None else {})}
    return httpx.post(f"{base}{path}", json=body, content=content, headers=headers, timeout=60)


def chat(**fields):
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **fields}


@pytest.mark.parametrize("path", ["/v1/models", "/metrics", "/v1/chat/completions", "/nope", "/openapi.json"])
@pytest.mark.parametrize("key", [None, "wrong", KEY.upper(), KEY + "x"])
def test_api_key_required_everywhere_but_health(base, path, key):
    r = httpx.request("GET" if path != "/v1/chat/completions" else "POST", f"{base}{path}", timeout=30,
                      headers={"Authorization": f"Bearer {key}"} if key is not None else {})  # fmt: skip
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200


def test_api_key_accepted(base):
    assert (
        httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).status_code
        == 200
    )
    assert post(base, chat()).status_code == 200


def test_body_limit_413(base):
    big = chat(messages=[{"role": "user", "content": "x" * 5000}])
    r = post(base, big)
    assert r.status_code == 413 and "Limits.body_bytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: counted as it arrives
        yield json.dumps(big).encode()

    r = post(base, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "body_bytes" in r.json()["error"]["message"]
    assert post(base, key=None, content=b"x" * 5000).status_code == 401  # auth before reading the body


@pytest.mark.parametrize(
    "fields, param, limit",
    [
        ({"max_tokens": 51}, "max_tokens", "max_tokens"),
        ({"max_completion_tokens": 51}, "max_completion_tokens", "max_tokens"),
        ({"n": 3}, "n", "n"),
        ({"tools": [TOOL, {**TOOL, "function": {**TOOL["function"], "name": "g"}}]}, "tools", "tools"),
        ({"stop": ["a", "b", "c"]}, "stop", "stop_strings"),
        ({"guided_regex": "a" * 70000}, "guided_regex", None),
    ],
    ids=["max_tokens", "max_completion_tokens", "n", "tools", "stop", "regex-size"],
)
def test_request_limits_400(base, fields, param, limit):
    r = post(base, chat(**fields))
    error = r.json()["error"]
    assert r.status_code in (400, 413), r.text
    if r.status_code == 400:
        assert error["param"] == param and f"Limits.{limit}" in error["message"], error
        assert error["code"] == "limit_exceeded"


def test_regex_limit_400(base):
    r = post(base, chat(guided_regex="a" * 3000))
    error = r.json()["error"]
    assert (
        r.status_code == 400 and error["param"] == "guided_regex" and "Limits.regex_bytes" in error["message"]
    )


def test_deeply_nested_body_is_400(base):
    r = post(base, content=b"[" * 1900 + b"]" * 1900, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text


def test_cli_reads_api_key_from_env(monkeypatch):
    from guided.cli import _limits, build_parser

    monkeypatch.setenv("GUIDED_API_KEY", "from-env")
    assert build_parser().parse_args(["serve"]).api_key == "from-env"
    assert build_parser().parse_args(["serve", "--api-key", "flag"]).api_key == "flag"
    monkeypatch.delenv("GUIDED_API_KEY")
    args = build_parser().parse_args(["serve"])
    assert args.api_key is None and args.host == "127.0.0.1"
    assert _limits(["body_bytes=10", "compile_timeout_s=2.5"]) == Limits(body_bytes=10, compile_timeout_s=2.5)
    for bad in (["nope=1"], ["body_bytes"], ["body_bytes=x"], ["n=0"]):
        with pytest.raises(ConfigError):
            _limits(bad)


def test_deeply_nested_schema_string_is_400(base):
    r = post(base, chat(guided_json="[" * 1200 + "]" * 1200))
    assert r.status_code == 400, r.text
