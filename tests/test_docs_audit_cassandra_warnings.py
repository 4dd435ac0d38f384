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
