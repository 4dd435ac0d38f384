#!/usr/bin/env python3
"""Write the generated pages of the documentation site from the code's own tables.

    .venv/bin/python scripts/gen_docs.py           # (re)write every generated page
    .venv/bin/python scripts/gen_docs.py --check   # exit 1, naming them, if any page is stale

Each page is made from one table, so that it cannot drift from the code:

    docs/reference/statements.md     fabricjobs/commands/table.py (STATEMENTS, PARAMETERS),
                                     grammar/fabricjobs.lark, fabricjobs/web/auth.py (roles)
    docs/reference/configuration.md  fabricjobs/config.py (KEYS)
    docs/reference/metrics.md        fabricjobs/node/metrics.py (METRICS)
    docs/reference/http-api.md       the OpenAPI document of fabricjobs web (fabricjobs/web/)
    docs/reference/cli.md            the fabricjobs command's argparse parser (fabricjobs/cli.py)
    docs/benchmarks.md               bench/results/*.json (scripts/bench.py --json)

tests/test_docs_site.py fails when a page differs from what this script writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run with any Python of the project's venv, or from a checkout
    sys.path.insert(0, str(ROOT))

from docgen import benchmarks, reference  # noqa: E402  (scripts/docgen, beside this script)

PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/statements.md": reference.statements_page,
    "docs/reference/configuration.md": reference.configuration_page,
    "docs/reference/metrics.md": reference.metrics_page,
    "docs/reference/http-api.md": reference.http_api_page,
    "docs/reference/cli.md": reference.cli_page,
    "docs/benchmarks.md": benchmarks.benchmarks_page,
}


def stale_pages() -> list[str]:
    """The generated pages whose text on disk is not what the code makes now."""
    stale = []
    for path, make in PAGES.items():
        file = ROOT / path
        if not file.is_file() or file.read_text(encoding="utf-8") != make():
            stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for path in stale:
            print(f"stale: {path} (run: .venv/bin/python scripts/gen_docs.py)")
        return 1 if stale else 0
    for path, make in PAGES.items():
        file = ROOT / path
        file.parent.mkdir(parents=True, exist_ok=True)
        text = make()
        if not file.is_file() or file.read_text(encoding="utf-8") != text:
            file.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
