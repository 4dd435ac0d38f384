"""`fabricjobs node` on Apache Cassandra, except that every LWT of the job named
``Probe.stamp`` with UID ``slow`` answers 3 s late, as an LWT sent to a coordinator that froze
does. The node's other jobs must not wait for it."""

import sys
import time

if __name__ == "__main__":
    from fabricjobs.store.cassandra import store

    original_apply = store.CassandraStore._apply

    def _apply(self, c):
        if (c.key.name, c.key.uid) == ("Probe.stamp", "slow"):
            time.sleep(3.0)
        return original_apply(self, c)

    store.CassandraStore._apply = _apply
    from fabricjobs.cli import main

    sys.exit(main(sys.argv[1:]))
