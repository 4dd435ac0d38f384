"""The documentation site (docs/, mkdocs.yml): it builds with no warning, its generated pages are
what the code's tables make now, and the README stays a front page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_generated_reference_pages_are_what_the_code_makes_now():
    """A statement, config key, metric, route or CLI option changed without running
    scripts/gen_docs.py fails here, naming the page (and the command that rewrites it)."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_site_builds_strict_with_every_page_in_the_nav(tmp_path):
    """mkdocs build --strict fails on a broken link or anchor, and on a page left out of the nav
    (mkdocs.yml, validation)."""
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    pages = sorted(p.relative_to(site) for p in site.rglob("index.html"))
    sources = sorted((ROOT / "docs").rglob("*.md"))
    assert len(pages) == len(sources), (pages, sources)
    print(f"docs: {len(pages)} pages built")


def test_the_readme_is_a_front_page_of_at_most_250_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the rest into docs/"


def test_code_and_pages_cite_docs_pages_not_spec_sections_issue_numbers_or_the_readme():
    """Comments and pages point where a reader can go: a docs page (docs/...), never a section of
    the specification, an issue number, or a README section that moved into the docs."""
    cited = re.compile(r"\bSPEC(\s+section)?\s+\d|\bissues?\s*#\s*\d|README,|the README's|see README")
    roots = ["fabricjobs", "grammar", "docs", "scripts", "tests", "examples"]
    files = [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "config.ini.example",
                                      "node.id.example", "mkdocs.yml")]
    for root in roots:
        files += [p for p in (ROOT / root).rglob("*") if p.is_file() and p.suffix in
                  {".py", ".md", ".lark", ".ini", ".sh", ".yml", ".yaml", ".service", ""} and "__pycache__" not in p.parts]
    found = []
    for path in files:
        if path.resolve() == Path(__file__).resolve():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if cited.search(line):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:100]}")
    assert not found, "cite a docs page instead:\n" + "\n".join(found)
