"""docs/benchmarks.md from the result files under bench/results/ (written later)."""

from __future__ import annotations


def benchmarks_page() -> str:
    return "# Benchmarks\n"
