"""`fabricjobs node` on SQLite, except that every whole-table read of the nodes made with a
timeout (the reconcile loop's) fails, as a Cassandra range read does while one replica is cut
off and not yet known to be down: it waits out the request timeout whichever coordinator runs
it. The node must still judge the nodes it knows, by their rows read one at a time."""

import sys

if __name__ == "__main__":
    from fabricjobs.errors import StoreError
    from fabricjobs.store.sqlite import store

    original_nodes = store.SqliteStore.nodes

    def nodes(self, timeout=None):
        if timeout is None:  # start-up's patient read
            return original_nodes(self, timeout)
        raise StoreError("injected: OperationTimedOut: the whole-table read of the nodes timed out")

    store.SqliteStore.nodes = nodes
    from fabricjobs.cli import main

    sys.exit(main(sys.argv[1:]))
