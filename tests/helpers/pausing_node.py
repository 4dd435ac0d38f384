"""`fabricjobs node`, except that the process SIGSTOPs itself once, right after its first claim
CAS applied and before the run is handed to a worker: a pause at the worst moment."""

import os
import signal
import sys

if __name__ == "__main__":
    from fabricjobs.node import executor

    original = executor.Executor.start
    state = {"paused": False}

    def start(self, row, pool, exceptional, generation):
        if not state["paused"]:
            state["paused"] = True
            os.kill(os.getpid(), signal.SIGSTOP)
        return original(self, row, pool, exceptional, generation)

    executor.Executor.start = start
    from fabricjobs.cli import main

    sys.exit(main(sys.argv[1:]))
