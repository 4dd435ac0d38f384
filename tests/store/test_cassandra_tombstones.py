"""The index queue on Apache Cassandra does not fill with tombstones.

Every claim and every outcome deletes an index entry at the head of a queue partition; Cassandra
counts the tombstones each read steps over and warns (``tombstone_warn_threshold``) or fails the
read (``tombstone_failure_threshold``). The test tier's Cassandra runs with both lowered (100 /
1,000, see scripts/test), and this test claims and finishes 20,000 jobs the way nodes do: two
claimer "nodes" (stores) read the WAITING queue, claim, finish, and read their own IN_PROCESS
bucket each round, while a submitter keeps a backlog. No read may warn (the store counts the
warnings Cassandra sends back) and the server's own histogram of tombstones per read of the
index stays under the warning threshold. The claim rate at the start and at the end is printed
(scripts/bench_cassandra.py --tombstones measures it as a benchmark: no timed test here).
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from backends import BACKENDS, make_backend_config
from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store

UTC = timezone.utc
JOBS = int(os.environ.get("FJ_TOMBSTONE_JOBS", 20_000))
BACKLOG = 400  # jobs waiting at most: a queue that is being drained, as in production
CLAIMERS = 2  # stores ("nodes")
THREADS = 4  # claiming threads per store
DEADLINE = 600.0  # seconds; reached only when the queue stalls


def _real(backend: str) -> bool:
    return backend == "cassandra-real"


@pytest.fixture(params=[b for b in BACKENDS if _real(b)] or
                [pytest.param("cassandra-real", marks=pytest.mark.skip(reason="needs Apache Cassandra (./scripts/test starts one)"))])
def config(request, tmp_path):
    return load_config(make_backend_config(request, request.param, tmp_path))


def _setting(store, name: str, default: int) -> int:
    row = store._session.execute("SELECT value FROM system_views.settings WHERE name = %s", (name,)).one()
    return int(row["value"]) if row and row["value"] not in (None, "null") else default


def _index_tombstones_per_read(store) -> tuple[float, float]:
    row = store._session.execute(
        "SELECT max, p99th FROM system_views.tombstones_per_read WHERE keyspace_name = %s AND table_name = %s",
        (store.keyspace, "k2_jobs_index")).one()
    return (row["max"], row["p99th"]) if row else (0.0, 0.0)


def test_twenty_thousand_claims_leave_no_read_stepping_over_tombstones(config):
    submitter = open_store(config)
    claimers = [open_store(config) for _ in range(CLAIMERS)]
    stores = [submitter, *claimers]
    warn = _setting(submitter, "tombstone_warn_threshold", 1000)
    finished = 0
    claimed_at: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def submit() -> None:
        now = datetime.now(UTC)
        for i in range(JOBS):
            while i - finished >= BACKLOG and not stop.is_set():
                time.sleep(0.005)
            if stop.is_set():
                return
            job = Job(JobKey("USER_JOB", "Load.run", f"j{i:05d}"), Status.WAITING, now,
                      next_run=now + timedelta(microseconds=i), arguments="{}")
            assert submitter.insert(job).applied

    def claim(store, node: str, seed: int) -> None:
        nonlocal finished
        rng = random.Random(seed)
        rounds = 0
        while not stop.is_set():
            with lock:
                if finished >= JOBS:
                    return
            page = store.waiting(16)
            rounds += 1
            if rounds % 4 == 0:
                store.by_owner([node], [Status.IN_PROCESS])  # what each reconcile pass reads too
            if not page:
                time.sleep(0.002)
                continue
            for row in rng.sample(page, min(len(page), 4)):
                now = datetime.now(UTC)
                got = store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id=node, epoch=row.epoch + 1,
                                                 start_time=now))
                if not got.applied:
                    continue
                with lock:
                    claimed_at.append(time.monotonic())
                done = got.row.replace(status=Status.PROCESSED, end_time=datetime.now(UTC), archived=True)
                assert store.cas(got.row, done).applied
                with lock:
                    finished += 1

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 (reported by the test thread)
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(submit,))]
    threads += [threading.Thread(target=guarded, args=(claim, s, f"node-{i}", i * 100 + t))
                for i, s in enumerate(claimers) for t in range(THREADS)]
    started = time.monotonic()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, DEADLINE - (time.monotonic() - started)))
        stop.set()
        assert not errors, errors[0]
        assert finished == JOBS, f"only {finished} of {JOBS} jobs finished in {DEADLINE:.0f} s"
        assert all(s.waiting(1) == [] for s in stores)
        worst, p99 = _index_tombstones_per_read(submitter)
        sweeps = sum(s.stats.index_sweeps for s in stores)
        tenth = JOBS // 10
        first = tenth / (claimed_at[tenth] - claimed_at[0])
        last = tenth / (claimed_at[-1] - claimed_at[-1 - tenth])
        print(f"\n{JOBS} jobs in {time.monotonic() - started:.1f} s; claims/s first tenth {first:.0f}, last tenth "
              f"{last:.0f} ({last / first:.2f}x); tombstones per index read max {worst:.0f} p99 {p99:.0f} "
              f"(warn at {warn}; the server's histogram rounds up to its buckets); {sweeps} sweeps")
        warnings = {f"store {i}": s.stats.server_warnings for i, s in enumerate(stores)}
        assert sum(warnings.values()) == 0, f"Cassandra warned on reads: {warnings} (see the store's log)"
        assert sweeps > 0
        log = os.environ.get("FABRICJOBS_CASSANDRA_LOG")
        if log and Path(log).exists():
            noisy = [line for line in Path(log).read_text(errors="replace").splitlines()
                     if "tombstone" in line.lower() and submitter.keyspace in line]
            assert not noisy, noisy[:3]
    finally:
        stop.set()
        for s in stores:
            s.close()
