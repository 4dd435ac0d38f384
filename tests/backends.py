"""The store backends every contract test runs against.

sqlite     always.
(cassandra arrives with its backend: the real driver against the CQL test server, or a real
cluster when FABRICJOBS_CASSANDRA_HOSTS is set.)
"""

from __future__ import annotations

from pathlib import Path

BACKENDS = ["sqlite"]


def write_config(path: Path, sections: dict[str, dict[str, object]]) -> Path:
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {v}" for k, v in keys.items())
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def make_backend_config(request, backend: str, tmp_path: Path, extra: dict | None = None) -> Path:
    sections: dict[str, dict[str, object]] = {}
    if backend == "sqlite":
        sections["store"] = {"BACKEND": "sqlite", "SQLITE_PATH": str(tmp_path / "jobs.db")}
    else:  # pragma: no cover - later backends
        raise ValueError(backend)
    for section, keys in (extra or {}).items():
        sections.setdefault(section, {}).update(keys)
    return write_config(tmp_path / "config.ini", sections)
