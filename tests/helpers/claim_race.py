"""One racer of the store contract's claim race (a separate OS process).

usage: claim_race.py CONFIG NODE GO_FILE OUT_FILE
Signals readiness with ready-NODE next to GO_FILE, waits for GO_FILE, then claims WAITING rows
in small random batches through the store until none is left; writes [[uid, epoch], ...] of the
claims that applied.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from fabricjobs.config import load_config
from fabricjobs.model import Status
from fabricjobs.store import open_store


def main() -> None:
    config, node, go, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    store = open_store(load_config(config))
    rng = random.Random(node)
    (go.parent / f"ready-{node}").touch()
    while not go.exists():
        time.sleep(0.001)
    mine: list[tuple[str, int]] = []
    while True:
        candidates = store.waiting(40)
        if not candidates:
            break
        batch = rng.sample(candidates, min(len(candidates), rng.randint(1, 8)))
        pairs = [(j, j.replace(status=Status.IN_PROCESS, worker_id=node, epoch=j.epoch + 1)) for j in batch]
        for res in store.cas_many(pairs):
            if res.applied:
                mine.append((res.row.uid, res.row.epoch))
    store.close()
    out.write_text(json.dumps(mine))


if __name__ == "__main__":
    main()
