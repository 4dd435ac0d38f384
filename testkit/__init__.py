"""The test kit: what the test suite, the benchmarks and the chaos soak use to run fabricjobs for
real, kept out of the product (the wheel holds ``fabricjobs/`` only; nothing in it imports this).

    rig.py          node processes on one store: started, killed, paused and watched the same way
                    by tests/harness.py, scripts/bench*.py and scripts/chaos.py
    netns.py        test hosts in network namespaces and the faults between them
    tunlink.py      the user-space link behind delay and loss; linkprobe.py measures it
    cqlserver/      the CQL test server: a test double of Cassandra with exact fault injection
    realcassandra/  Apache Cassandra 5.0 from Maven, run on loopback (scripts/cassandra)

It is importable from a checkout: the editable install puts the checkout on the path, and the
scripts add it themselves.
"""
