"""docs/reference/http-api.md from the OpenAPI document that fabricjobs web serves.

The document is made by the application itself (FastAPI, from the routes that serve requests),
on an empty SQLite store in a temporary directory: no server, no network.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .reference import cell, code, header

_METHODS = ("get", "post", "put", "patch", "delete")


def openapi_document() -> dict[str, Any]:
    from fabricjobs.config import parse_config
    from fabricjobs.store import open_store
    from fabricjobs.web.app import Api, create_app
    from fabricjobs.web.tokens import TokenFile

    with tempfile.TemporaryDirectory(prefix="fabricjobs-docs-") as d:
        cfg_path = Path(d) / "config.ini"
        cfg_path.write_text(f"[store]\nSQLITE_PATH = {Path(d) / 'jobs.db'}\n", encoding="utf-8")
        cfg = parse_config(cfg_path.read_text(encoding="utf-8"), source=cfg_path)
        store = open_store(cfg)
        try:
            app = create_app(Api(store, cfg, TokenFile(cfg.get("web", "TOKENS_FILE"))))
            return app.openapi()
        finally:
            store.close()


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " | ".join(f"`{v}`" for v in schema["enum"])
    return schema.get("type", "object") if schema else "any"


def _parameters(op: dict[str, Any]) -> list[str]:
    params = op.get("parameters", [])
    if not params:
        return []
    rows = ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
    for p in params:
        schema = p.get("schema", {})
        default = f" (default: {code(schema['default'])})" if "default" in schema and schema["default"] is not None else ""
        meaning = p.get("description") or schema.get("description") or ""
        rows.append(f"| `{p['name']}` | {p['in']} | {cell(_type(schema))} | {'yes' if p.get('required') else 'no'} | "
                    f"{cell(meaning)}{default} |")
    return [*rows, ""]


def _operation(path: str, method: str, op: dict[str, Any], common: dict[str, str]) -> list[str]:
    out = [f"### {method.upper()} {path}", ""]
    if op.get("summary"):
        out += [f"**{op['summary']}**", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    out += _parameters(op)
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        out += [f"Request body ({media}): {_type(content.get('schema', {}))}", ""]
    rows = []
    for status, response in sorted(op.get("responses", {}).items()):
        if status == "422" or common.get(status) == response.get("description"):
            continue  # 422: FastAPI's own validation shape (our handler answers 400); common: listed once
        rows.append(f"| {status} | {cell(response.get('description', ''))} |")
    if rows:
        out += ["| status | meaning |", "|---|---|", *rows, ""]
    return out


def _common_errors(ops: list[dict[str, Any]]) -> dict[str, str]:
    """The error statuses (4xx, 5xx) every operation documents alike."""
    common: dict[str, str] | None = None
    for op in ops:
        mine = {s: r.get("description", "") for s, r in op.get("responses", {}).items() if s[0] in "45" and s != "422"}
        common = mine if common is None else {s: t for s, t in common.items() if mine.get(s) == t}
    return common or {}


def _schemas(doc: dict[str, Any]) -> list[str]:
    out = ["## Schemas", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        if name in ("HTTPValidationError", "ValidationError"):
            continue
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [schema["description"].strip(), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | meaning |", "|---|---|---|---|"]
            for field, fs in props.items():
                out.append(f"| `{field}` | {cell(_type(fs))} | {'yes' if field in required else 'no'} | "
                           f"{cell(fs.get('description', ''))} |")
            out.append("")
    return out


def http_api_page() -> str:
    doc = openapi_document()
    out = header("HTTP API", "the OpenAPI document of fabricjobs web")
    out += [
        f"{doc['info'].get('description', '').strip()}",
        "",
        f"API version {doc['info']['version']}, OpenAPI {doc['openapi']}. The live document is served",
        "at `/api/v1/openapi.json`. A job is addressed as `/api/v1/jobs/{type}/{name}/{uid}`; a name or",
        "UID that holds `/` or `%` is percent-encoded as one path segment. Errors are JSON",
        "`{\"error\": TYPE, \"message\": TEXT}` with the command language's words. How to use it, with",
        "examples and the roles: [HTTP API and tokens](../guides/http-api.md).",
        "",
        "## Operations",
        "",
    ]
    ops = [(path, m, item[m]) for path, item in doc["paths"].items() for m in _METHODS if m in item]
    common = _common_errors([op for path, _, op in ops if path.startswith("/api/")])
    out += ["Every operation may also answer:", "", "| status | meaning |", "|---|---|"]
    out += [f"| {status} | {cell(text)} |" for status, text in sorted(common.items())] + [""]
    for path, method, op in ops:
        out += _operation(path, method, op, common)
    out += _schemas(doc)
    return "\n".join(out).rstrip() + "\n"
