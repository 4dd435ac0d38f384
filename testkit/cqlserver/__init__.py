"""CQL test server: a TEST DOUBLE, NOT Cassandra.

A small loopback server that speaks the CQL native protocol v4 well enough for the real
cassandra-driver, and implements a CQL subset with Cassandra's semantics (timestamps and
tombstones, TTLs, lightweight transactions and their ``[applied]`` result shapes, paging) and
Cassandra's rejections (ALLOW FILTERING, primary key rules, conditional batch limits, SERIAL
reads, ...). It exists so that fabricjobs' Cassandra store can be tested through the real
driver, including the failures a real cluster produces: injected WriteTimeout (CAS/SIMPLE),
protocol-v5 CAS_WRITE_UNKNOWN (0x1700), delays (client-side OperationTimedOut), Unavailable,
Overloaded -- each with the mutation applied or not.

It is one in-memory "node": no replication, no compaction, no durability, no secondary
indexes, views, UDTs, counters, static columns or user functions. A passing test against it
says nothing about performance and is no substitute for a run against real Cassandra.

    from testkit.cqlserver import CqlTestServer
    with CqlTestServer() as server:                         # 127.0.0.1, free port
        cluster = Cluster([server.host], port=server.port, protocol_version=4)
        server.faults.write_timeout("UPDATE jobs", write_type="CAS", applied=True)
        server.advance(60)                                  # TTLs expire without sleeping
        print(server.stats.snapshot())

Modules: ``server`` (sockets, dispatch, fault application), ``protocol`` (frames and message
bodies), ``cql_parser`` (tokenizer and parser), ``engine`` (analysis, execution),
``restrictions`` (WHERE restrictions on columns, one or several: merged and checked as
Cassandra does), ``storage`` (schema objects, cells/tombstones), ``tokens`` (token():
selectors, WHERE token restrictions over the ring), ``values`` (types and codecs),
``system_tables``, ``faults`` (fault rules, counters), ``control`` (side channel for a server in
another process), ``errors``.
"""

from .control import ControlClient
from .faults import FaultInjector, FaultRule, Stats
from .server import CqlTestServer

__all__ = ["CqlTestServer", "ControlClient", "FaultInjector", "FaultRule", "Stats"]
