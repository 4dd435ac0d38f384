"""`fabricjobs node` on SQLite, except that every whole-table read of the nodes made with a
timeout (the reconcile loop's) takes 2 s, as a Cassandra range read does while a replica is
down and not yet known to be. The node's due jobs must not wait behind it."""

import sys
import time

if __name__ == "__main__":
    from fabricjobs.store.sqlite import store

    original_nodes = store.SqliteStore.nodes

    def nodes(self, timeout=None):
        if timeout is not None:  # not start-up's patient read
            time.sleep(2.0)
        return original_nodes(self, timeout)

    store.SqliteStore.nodes = nodes
    from fabricjobs.cli import main

    sys.exit(main(sys.argv[1:]))
