"""The API tests' shared site: a real ``fabricjobs web`` process and a real node on one SQLite
store for a whole test module (each starts in about a second; the tests only read what they
wrote themselves, under UIDs of their own), with one token per role made by the real CLI."""

from __future__ import annotations

import pytest

from web_site import running_site


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    with running_site(request, tmp_path_factory.mktemp("web")) as site:
        yield site
