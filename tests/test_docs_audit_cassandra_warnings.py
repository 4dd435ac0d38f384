"""Cassandra's warnings to a client (a batch too large, tombstones met by a read) are counted
and logged by the store at most once a minute per kind (docs/guides/operations/troubleshooting.md):
the driver's own line for each one is not logged as well. A node's first start on Cassandra
5.0 logged 20 lines for the 10 warnings its schema's creation drew; a read meeting tombstones
would log one line per read."""

from __future__ import annotations

import logging

import pytest

from backends import BACKENDS, make_backend_config
from fabricjobs.config import load_config
from fabricjobs.store import open_store


@pytest.fixture(params=[b for b in BACKENDS if b == "cassandra-real"] or
                [pytest.param("cassandra-real", marks=pytest.mark.skip(reason="needs Apache Cassandra (./scripts/test starts one)"))])
def store(request, tmp_path):
    s = open_store(load_config(make_backend_config(request, request.param, tmp_path)))
    yield s
    s.close()


def test_each_warning_is_counted_and_one_line_a_kind_is_logged(store, caplog):
    ks = store.keyspace
    session = store._session  # (the driver session the store sends everything through)
    session.execute(f"CREATE TABLE IF NOT EXISTS {ks}.audit_batch (k int, c int, v text, PRIMARY KEY (k, c))")
    big = "x" * 3000  # two partitions of it: a batch above Cassandra's 5 KiB warning threshold
    batch = (f"BEGIN UNLOGGED BATCH INSERT INTO {ks}.audit_batch (k, c, v) VALUES (1, 1, '{big}'); "
             f"INSERT INTO {ks}.audit_batch (k, c, v) VALUES (2, 1, '{big}'); APPLY BATCH")
    before = store.stats.server_warnings
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            session.execute(batch)
    assert store.stats.server_warnings - before == 3  # every warning counted
    lines = [r.getMessage() for r in caplog.records if "Batch" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("Cassandra warned: "), lines


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.startswith("cassandra")])
def test_an_empty_local_dc_on_one_data_centre_draws_no_advice_to_set_it(backend, request, tmp_path, caplog):
    """The driver logs "Using datacenter ...; if incorrect, please specify a local_dc" for each
    policy when LOCAL_DC is empty, which one data centre allows (docs/guides/cassandra.md):
    that line is not passed on, several times over, into every node's log."""
    with caplog.at_level(logging.INFO):
        s = open_store(load_config(make_backend_config(request, backend, tmp_path)))
        try:
            s.get_many([])  # (connected: the policies have chosen their data centre)
        finally:
            s.close()
    assert not [r for r in caplog.records if "Using datacenter" in r.getMessage()], caplog.text
