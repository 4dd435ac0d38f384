"""`fabricjobs node` on SQLite, except that the first COMMIT of a write that holds a run's
final outcome fails once, as a full disk made it fail ("database or disk is full"):
what the transaction wrote is rolled back, and the node must write the outcome again later
rather than forget the run with its row still IN_PROCESS. No root needed (the tmpfs variant
of tests/test_hardening.py needs it to mount a small filesystem)."""

import sys

if __name__ == "__main__":
    from fabricjobs.errors import StoreError
    from fabricjobs.store.sqlite import connection, store

    state = {"outcome_in_transaction": False, "failed": False}
    original_cas_many, original_end = store.SqliteStore.cas_many, connection.Connections._end

    def cas_many(self, pairs, runs=None, **kw):
        if any(new.archived for _old, new in pairs):
            state["outcome_in_transaction"] = True
        return original_cas_many(self, pairs, runs, **kw)

    def end(self, conn, commit):
        if commit and state["outcome_in_transaction"] and not state["failed"]:
            state["failed"] = True
            original_end(self, conn, commit=False)  # what a failed COMMIT leaves: nothing of it
            print("injected: COMMIT failed: database or disk is full", file=sys.stderr, flush=True)
            raise StoreError("SQLite error: database or disk is full")
        state["outcome_in_transaction"] = False
        return original_end(self, conn, commit)

    store.SqliteStore.cas_many = cas_many
    connection.Connections._end = end
    from fabricjobs.cli import main

    sys.exit(main(sys.argv[1:]))
