"""The k2_jobs rows: a Job to and from its row, reads by key, and the lightweight transaction
that changes one row, with an outcome that is unknown settled by a SERIAL read of the row.

Every change of a row is a prepared LWT (``IF NOT EXISTS`` or ``IF status = ? AND epoch = ? AND
worker_id = ? AND revision = ?``), never a plain write; the inserts and CAS that build them are
in store.py, since each also writes the index and history around its LWT.

Unknown outcomes: a ``WriteTimeout`` of type CAS or SIMPLE, the protocol-v5 error 0x1700
(CAS_WRITE_UNKNOWN, which the Python driver surfaces as a bare ``ErrorMessage``), an
``Unavailable`` (it may come from the commit of an accepted proposal) and a client-side
``OperationTimedOut`` are settled by a SERIAL read of the row: if it shows our
write (the revision we wrote with our status, owner and epoch), the CAS applied; if the row
is unchanged, the timeout was contention and the LWT is retried with jittered backoff
(bounded); otherwise it did not apply. LWT statements use a retry policy that never resends.
"""

from __future__ import annotations

import random
import time
from dataclasses import fields
from datetime import datetime, timezone
from typing import Callable, Sequence, TypeVar

from ...errors import StoreError, StoreUnavailable
from ...model import Job, JobKey, Status
from .schema import COUNTERS as _COUNTERS
from .session import Session, _result, driver_error, log

UTC = timezone.utc
_EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)  # a missing due time; a candidate's creation_time
_CAS_UNKNOWN = 0x1700
_CONTENTION_RETRIES = 8
_STATUS = {s.value: s for s in Status}

_JOB_COLUMNS = tuple(
    f.name for f in fields(Job) if f.name != "key"
)  # status, creation_time, archived, affinity, arguments, ..., the counters


def _stored_ms(when: datetime) -> datetime:
    """``when`` as Cassandra stores a timestamp: in whole milliseconds."""
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


_T = TypeVar("_T")
_TIME_FIELDS = ("creation_time", "start_time", "end_time", "next_run", "hold_until", "resume_at")


def as_stored(job: Job) -> Job:
    """``job`` as a read of its row returns it: its times in whole milliseconds (a write's
    result built from what it wrote, not read back, must compare equal to a read)."""
    changes = {name: _stored_ms(when) for name in _TIME_FIELDS
               if (when := getattr(job, name)) is not None and when.microsecond % 1000}
    return job.replace(**changes) if changes else job


def _when(value: datetime) -> datetime:
    """A time column that always has a value (a key, or written with every row), in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else _when(value)


def _unknown_outcome(exc: Exception) -> str:
    """Why an LWT that raised ``exc`` may or may not have applied (to be settled by a SERIAL
    read); a StoreError for an error that proves it did not: a write timeout or failure (the
    proposal may have reached some replicas), the protocol-v5 CAS_WRITE_UNKNOWN, the client's
    own timeout, and a connection lost after the request may have been sent."""
    from cassandra import OperationTimedOut, Unavailable, WriteFailure, WriteTimeout
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.policies import WriteType
    from cassandra.protocol import ErrorMessage

    if isinstance(exc, WriteTimeout):
        if exc.write_type not in (WriteType.CAS, WriteType.SIMPLE):
            raise StoreUnavailable(f"Cassandra write timeout ({exc})") from None
        return f"WriteTimeout({WriteType.value_to_name.get(exc.write_type, exc.write_type)})"
    if isinstance(exc, WriteFailure):
        return f"WriteFailure({exc})"
    if isinstance(exc, Unavailable):
        from cassandra import ConsistencyLevel

        if exc.consistency in (ConsistencyLevel.SERIAL, ConsistencyLevel.LOCAL_SERIAL):
            # Too few replicas for the Paxos round itself: nothing was proposed.
            raise StoreUnavailable(f"Cassandra: too few replicas for a lightweight transaction ({exc})") from None
        # At the commit's level it may come after a quorum accepted the proposal: settled
        # like the others, not taken for "not applied".
        return "Unavailable"
    if isinstance(exc, OperationTimedOut):
        return "client timeout"
    if isinstance(exc, (ConnectionException, NoHostAvailable)):
        if isinstance(exc, NoHostAvailable) and not any(
                isinstance(e, (ConnectionException, OperationTimedOut)) for e in exc.errors.values()):
            raise driver_error(exc, f"Cassandra: {exc}") from None  # refused before it was sent
        return f"connection lost ({type(exc).__name__})"
    if isinstance(exc, ErrorMessage) and getattr(exc, "code", None) == _CAS_UNKNOWN:
        return "CAS_WRITE_UNKNOWN"
    if isinstance(exc, StoreError):
        raise exc
    raise driver_error(exc, f"Cassandra error: {exc}") from None


class Rows(Session):
    """Reads of k2_jobs rows by key, and the LWT core that changes them."""

    @staticmethod
    def _job(row: dict) -> Job:
        return Job(
            key=JobKey(row["type"], row["name"], row["uid"]),
            status=_STATUS[row["status"]],
            creation_time=_aware(row["creation_time"]),  # type: ignore[arg-type]  # null only in a row half gone by TTL
            archived=bool(row["archived"]),
            affinity=row["affinity"] or "",
            arguments=row["arguments"] if row["arguments"] is not None else "{}",
            execution_interval=row["execution_interval"] or "",
            start_time=_aware(row["start_time"]),
            end_time=_aware(row["end_time"]),
            next_run=_aware(row["next_run"]),
            hold_until=_aware(row["hold_until"]),
            error_msg=row["error_msg"] or "",
            output=row["output"],
            tries=row["tries"] or 0,
            worker_id=row["worker_id"],
            epoch=row["epoch"] or 0,
            revision=row["revision"] or 0,
            priority=row["priority"] if row["priority"] is not None else 4,
            **{c: row.get(c) or 0 for c in _COUNTERS},
            depends_on=row.get("depends_on") or "",
            blocked=bool(row.get("blocked")),
            time_zone=row.get("time_zone") or "",
            late_threshold=row.get("late_threshold") or "",
            overlap=row.get("overlap") or "",
            finishing=bool(row.get("finishing")),
            resume_at=_aware(row.get("resume_at")),
            late_action=row.get("late_action") or "",
            on_failure=row.get("on_failure") or "",
            owner=row.get("owner") or "",
            requestor=row.get("requestor") or "",
            calendar=row.get("calendar") or "",
            delete_on_success=row.get("delete_on_success") or "",
            parallelism=row.get("parallelism") or 0,
            task_of=row.get("task_of") or "",
            failed_after_retry=row.get("failed_after_retry") or 0,
            failed_without_retry=row.get("failed_without_retry") or 0,
            canceled=row.get("canceled") or 0,
        )

    def _get_stmt(self):
        return self._stmt(("get",), f"SELECT type, name, uid, {', '.join(_JOB_COLUMNS)} FROM k2_jobs "
                                    "WHERE type = ? AND name = ? AND uid = ?")

    def _select_job(self, key: JobKey, serial: bool = False) -> Job | None:
        stmt = self._get_stmt()
        try:
            if serial:
                row = self._session.execute(stmt, (key.type, key.name, key.uid), execution_profile="serial").one()
            else:
                row = self._session.execute(stmt, (key.type, key.name, key.uid)).one()
        except Exception as exc:
            raise driver_error(exc, f"Cassandra: cannot read {key}: {type(exc).__name__}: {exc}") from None
        return None if row is None or row.get("status") is None else self._job(row)

    def get(self, key: JobKey) -> Job | None:
        return self._select_job(key)

    def get_many(self, keys: Sequence[JobKey]) -> list[Job | None]:
        """One single-row read per key, sent together. Not one ``uid IN`` per job name, though
        that costs a fifth as much on a healthy cluster (docs/explanation/cassandra-queue.md):
        a read of many partitions waits for a replica of each, and with 5 % of the messages
        between Cassandra hosts lost, one of 30 partitions' answers nearly always was, and the
        whole read timed out (a single-row read is sent again to another host, speculatively)."""
        stmt = self._get_stmt()
        out: list[Job | None] = []
        for i in range(0, len(keys), 256):
            futures = [self._session.execute_async(stmt, (k.type, k.name, k.uid)) for k in keys[i:i + 256]]
            for f in futures:
                row = _result(f).one()
                out.append(None if row is None or row.get("status") is None else self._job(row))
        return out

    def _execute_lwt(self, stmt, params, key: JobKey, ours, unchanged,
                     before_retry=None) -> tuple[bool, dict | None, Job | None]:
        """Run one LWT; settle an unknown outcome with a SERIAL read.

        Returns (applied, the [applied] row when known, the row read at SERIAL when the
        outcome had to be settled). ``ours(row)`` says whether a row shows our write;
        ``unchanged(row)`` whether the row is still as the LWT expected (then the unknown
        outcome was contention, and the LWT is sent again after a jittered pause, with
        ``before_retry()`` first: it re-writes the index intent, so that no reader's grace can
        run out under a write that is still being tried). An attempt after an unknown outcome
        that answers "not applied" may have met our own earlier attempt: it is checked too.

        Unknown outcomes: a write timeout or failure (the proposal may have reached some
        replicas), the protocol-v5 CAS_WRITE_UNKNOWN, the client's own timeout, and a
        connection lost after the request may have been sent.
        """
        self._get_stmt()  # the settling read's, prepared now: not when a host has just gone silent
        backoff = 0.01
        retried = False
        for attempt in range(_CONTENTION_RETRIES):
            try:
                row = self._session.execute(stmt, params, execution_profile="lwt").one()
                if row["[applied]"] or not retried:
                    return bool(row["[applied]"]), row, None
                why = "a retry not applied"  # maybe because our earlier attempt did apply
            except Exception as exc:
                why = _unknown_outcome(exc)
            self.stats.unknown_outcomes += 1
            current = self._settle_read(key)
            if current is not None and ours(current):
                log.info("LWT on %s had an unknown outcome (%s); a SERIAL read shows it applied", key, why)
                return True, None, current
            if attempt + 1 < _CONTENTION_RETRIES and unchanged(current):
                # Nobody changed the row: the timeout was contention. Try again, later.
                self.stats.contention_retries += 1
                time.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 0.5)
                if before_retry is not None:
                    before_retry()
                retried = True
                continue
            log.info("LWT on %s had an unknown outcome (%s); a SERIAL read shows it did not apply", key, why)
            return False, None, current
        raise StoreError(f"gave up on {key} after {_CONTENTION_RETRIES} contended attempts")

    def _settle_read(self, key: JobKey) -> Job | None:
        """The row at SERIAL, to settle an unknown outcome (see :meth:`_serially`)."""
        return self._serially(lambda: self._select_job(key, serial=True))

    def _serially(self, read: Callable[[], _T]) -> _T:
        """``read`` (a read at SERIAL, raising StoreError) to settle an unknown outcome. The
        host that left the LWT unanswered may coordinate this read too, and a lost connection
        may have taken the only reachable host down with it: the read is tried again, for up to
        two request timeouts or 5 s (then the outcome stays unknown and the caller's write
        fails; it is looked at again later)."""
        deadline = time.monotonic() + max(2 * self.request_timeout, 5.0)
        pause = 0.05
        while True:
            try:
                return read()
            except StoreError:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
