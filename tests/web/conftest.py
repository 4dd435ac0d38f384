"""The API tests' shared site: a real ``fabricjobs web`` process and a real node on one store
for a whole test module (each starts in about a second; the tests only read what they wrote
themselves, under UIDs of their own), with one token per role made by the real CLI.

The site is made once per backend: SQLite and the Cassandra backend on the CQL test server
(tests/backends.py) for every test. Apache Cassandra itself ("cassandra-real", when
FABRICJOBS_CASSANDRA_HOSTS is set) is asked for by a test marked ``@on_every_backend``
(web_site.py): one site on it per module, for a representative few, as its tier must stay short."""

from __future__ import annotations

import pytest

from web_site import API_BACKENDS, running_site


@pytest.fixture(scope="module", params=API_BACKENDS)
def site(request, tmp_path_factory):
    with running_site(request, tmp_path_factory.mktemp("web"), backend=request.param) as site:
        yield site
