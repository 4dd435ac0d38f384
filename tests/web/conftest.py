"""The API tests' shared site: a real ``fabricjobs web`` process and a real node on one SQLite
store for a whole test module (each starts in about a second; the tests only read what they
wrote themselves, under UIDs of their own), with one token per role made by the real CLI."""

from __future__ import annotations

import pytest

from harness import Cluster
from web_site import Site, WebProcess, make_tokens


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("web")
    cluster = Cluster(tmp, "sqlite", request=request)
    try:
        cluster.start_node("w1")
        tokens = make_tokens(cluster)
        web = WebProcess.start(cluster)
        try:
            yield Site(cluster, web, tokens)
        finally:
            web.stop()
    finally:
        cluster.stop_all()
