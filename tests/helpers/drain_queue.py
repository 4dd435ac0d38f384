"""One claimer "node" of the tombstone test (a separate OS process, as nodes are).

usage: drain_queue.py CONFIG NODE SUBMITTED_FILE OUT_FILE [MAX_CLAIMS_PER_SEC]
Claims WAITING jobs (at most MAX_CLAIMS_PER_SEC, default 100: the tombstones a read meets grow
with the claim rate, so a faster machine must not make the test a different one) and finishes them (two LWTs each, as a node's claim and outcome), reading
its own IN_PROCESS bucket every few rounds as a reconcile pass does, until the queue is empty
and SUBMITTED_FILE exists. Writes {"claimed_at": [wall times], "stats": {...}} to OUT_FILE.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from fabricjobs.config import load_config
from fabricjobs.model import Status
from fabricjobs.store import open_store

UTC = timezone.utc


def main() -> None:
    config, node, submitted, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    pace = float(sys.argv[5]) if len(sys.argv) > 5 else 100.0
    started = time.monotonic()
    store = open_store(load_config(config))
    rng = random.Random(node)
    claimed_at: list[float] = []
    rounds = 0
    while True:
        page = store.waiting(32)
        rounds += 1
        if rounds % 4 == 0:
            store.by_owner([node], [Status.IN_PROCESS])
        if not page:
            if submitted.exists() and not store.waiting(1):
                break
            time.sleep(0.005)
            continue
        ahead = len(claimed_at) / pace - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
        now = datetime.now(UTC)
        batch = rng.sample(page, min(len(page), 8))
        pairs = [(j, j.replace(status=Status.IN_PROCESS, worker_id=node, epoch=j.epoch + 1, start_time=now))
                 for j in batch]
        claimed = [r.row for r in store.cas_many(pairs) if r.applied]
        claimed_at.extend([time.time()] * len(claimed))
        done = [(row, row.replace(status=Status.PROCESSED, end_time=datetime.now(UTC), archived=True)) for row in claimed]
        results = store.cas_many(done)
        assert all(r.applied for r in results), "a finish was refused: the claim was not ours"
    stats = asdict(store.stats)
    store.close()
    out.write_text(json.dumps({"claimed_at": claimed_at, "stats": stats}))


if __name__ == "__main__":
    main()
