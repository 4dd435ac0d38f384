"""CassandraStore: the JobStore on Cassandra, put together from its parts, and the changes of
rows that tie the parts together.

An insert or CAS is the one place where a row, its index entry and its history line are
written together, without a transaction across tables: first the writes that must precede the
LWT (the index intent, the archive entry, the run's history line), then the LWT, then what it
superseded is tidied (index.py says why in that order, rows.py how an LWT's unknown outcome is
settled).

LWTs per job life cycle: a one-time job costs 3 (insert, claim, outcome); each fire of a
recurring job costs 2 (its owner's claim from SCHEDULED, outcome; 3 when its owner has no room
and writes it WAITING first). See docs/guides/cassandra.md#what-to-size for what that means in latency.
"""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ...config import Config
from ...errors import InsertInterrupted, StoreError
from ...model import RUN_COUNTERS, Job, JobKey, JobType, Status
from ..base import CasResult, JobStore, RunRecord, Version, Whole, each_whole
from . import topology
from .calendars import Calendars
from .clock import ClusterClock
from .history import History
from .index import _bucket, _job_bucket, _slot
from .livelog import LiveLog
from .nodes import Nodes
from .queue import CANDIDATE_FIELDS, Queue
from .repair import Repair
from .rows import _EPOCH0, _JOB_COLUMNS, _STATUS, _when, as_stored
from .schema import SchemaManager, check_keyspace_name
from .listing import LISTING_SINCE, life_of
from .search import Search
from .hosts import Unanswered
from .topology import Placement
from .session import _bound, credentials, execution_profiles, log, new_cluster

PLACEMENT_RECHECK_SEC = 30.0  # how often a shell or web process re-reads the nodes' placement before a write
_PLACEMENT_RETRY_SEC = 5.0  # ... and how soon again when the nodes table could not be read


@dataclass
class _Change:
    """One prepared CAS of cas_many: its LWT, and the writes before and after it."""
    expected: Job
    target: Job
    revision: int
    full: bool
    stmt: Any
    params: tuple
    new_bucket: str | None
    record: RunRecord | None
    whole: bool = False  # expected is a whole row: an applied write's row is the target, not read back
    written: tuple[str, ...] = ()  # the columns its UPDATE sets (besides the revision)
    before: list = field(default_factory=list)
    after: list = field(default_factory=list)

    @property
    def key(self) -> JobKey:
        return self.expected.key

    @property
    def sent(self) -> tuple:
        """What tells this change sent again from another: the row, the revision it makes, the run."""
        return (self.key, self.revision, self.record.epoch if self.record is not None else None)


class CassandraStore(Queue, Repair, History, Search, Nodes, Calendars, LiveLog, JobStore):
    """k2_jobs with lightweight-transaction CAS, for a cluster of nodes that spans hosts."""

    backend = "cassandra"
    deletes_archived = False  # archived rows expire by TTL
    keeps_index = True  # k2_jobs_index (index.py), checked by the repair pass (repair.py)
    candidates_whole = False  # read from k2_jobs_index (queue.py)

    def __init__(
        self,
        *,
        hosts: Sequence[str],
        port: int = 9042,
        keyspace: str = "k2system",
        replication: str = "",
        local_dc: str = "",
        consistency: str = "LOCAL_QUORUM",
        serial_consistency: str = "SERIAL",
        username: str = "",
        password: str = "",
        tls: bool = False,
        tls_ca_file: str = "",
        tls_cert_file: str = "",
        tls_key_file: str = "",
        tls_verify: bool = True,
        connect_timeout: float = 10.0,
        request_timeout: float = 10.0,
        speculative_delay: float = 0.3,
        create_schema: bool = True,
        protocol_version: int = 4,
        archive_ttl_seconds: int = 720 * 3600,
        token_aware: bool = True,
        max_clock_skew: float = 60.0,
    ) -> None:
        """Connect, then create or check the schema (``create_schema``); what was opened is closed
        again if either fails."""
        check_keyspace_name(keyspace)
        self.keyspace = keyspace
        self.identity = f"cassandra:{','.join(sorted(hosts))}:{port}:{keyspace}"
        self.archive_ttl = max(1, int(archive_ttl_seconds))
        self.request_timeout = request_timeout
        # The reads of opening (schema, placement) may wait as long as connecting may: a start
        # on a busy cluster should not fail where a running node would have tried again.
        self._open_timeout = max(request_timeout, connect_timeout)
        unanswered = Unanswered()
        profiles = execution_profiles(consistency=consistency, serial_consistency=serial_consistency,
                                      local_dc=local_dc, token_aware=token_aware, request_timeout=request_timeout,
                                      speculative_delay=speculative_delay, unanswered=unanswered)
        options = credentials(username=username, password=password, tls=tls, tls_ca_file=tls_ca_file,
                              tls_cert_file=tls_cert_file, tls_key_file=tls_key_file, tls_verify=tls_verify)
        self._clock = ClusterClock(max_skew=max_clock_skew)
        cluster = new_cluster(hosts, port, protocol_version=protocol_version, connect_timeout=connect_timeout,
                              token_aware=token_aware, profiles=profiles, timestamps=self._clock, **options)
        self._connect(cluster, f"{', '.join(hosts)}:{port}", unanswered, self._clock)
        self._placement = Placement(local_dc, consistency, serial_consistency)
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="cassandra-cas")  # (writes that straggle hold theirs)
        self._init_index(self._clock.now)
        self._unsettled: set[tuple] = set()  # outcome changes whose send raised: a later send is a re-send
        self._init_history()
        self._closed = False
        try:
            known = self._cluster.metadata.all_hosts()
            self._placement = Placement(topology.local_dc(local_dc, (h.datacenter for h in known)),
                                        consistency, serial_consistency)
            self._sync_clock()  # before anything is written: every write is stamped by it
            for _ in range(3):  # no host answered in time: a little later, before writes are refused
                if self._clock.measured:
                    break
                time.sleep(0.5)
                self._sync_clock()
            self._clock.keep_in_sync(self._sync_clock)
            self._setup_schema(create_schema, lambda: topology.replication_for(replication, len(known)))
            topology.check_placement(self._placement, self._peers(self._open_timeout))
            self._placement_checked: float | None = time.monotonic()
            self._placement_lock = threading.Lock()
        except Exception:
            self.close()
            raise

    @classmethod
    def from_config(cls, config: Config) -> "CassandraStore":
        c = config.section("cassandra")
        return cls(
            hosts=c["HOSTS"], port=c["PORT"], keyspace=c["KEYSPACE"], replication=c["REPLICATION"],
            local_dc=c["LOCAL_DC"], consistency=c["CONSISTENCY"], serial_consistency=c["SERIAL_CONSISTENCY"],
            username=c["USERNAME"], password=c["PASSWORD"], tls=c["TLS"], tls_ca_file=c["TLS_CA_FILE"],
            tls_cert_file=c["TLS_CERT_FILE"], tls_key_file=c["TLS_KEY_FILE"], tls_verify=c["TLS_VERIFY"],
            connect_timeout=c["CONNECT_TIMEOUT_SEC"], request_timeout=c["REQUEST_TIMEOUT_SEC"],
            speculative_delay=c["SPECULATIVE_DELAY_MS"] / 1000.0,
            create_schema=c["CREATE_SCHEMA"], protocol_version=c["PROTOCOL_VERSION"],
            archive_ttl_seconds=int(config.get("jobs", "K2JOB_ARCHIVING_TIME_HOUR") * 3600),
            token_aware=c["TOKEN_AWARE"], max_clock_skew=c["MAX_CLOCK_SKEW_SEC"],
        )

    # -- schema ----------------------------------------------------------------------------------

    def _setup_schema(self, create: bool, replication: Callable[[], str]) -> None:
        self._schema = SchemaManager(self._session, self.keyspace)
        self._schema.ensure(create, replication)
        self._list_once()

    def _list_once(self) -> None:
        """Fill k2_jobs_live from the index once per keyspace (an upgrade from before it, by a
        node or by an administrator's CQL): marked done by the row id = 'k2_jobs_live' of
        fabricjobs_schema, so a start after that costs one read."""
        mark = self._stmt(("listedmark",), "SELECT version FROM fabricjobs_schema WHERE id = 'k2_jobs_live'")
        if self._clock.refuses or self._run(mark, (), self._open_timeout).one() is not None:
            return  # (a host that may not write leaves it to the others)
        listed = self._list_indexed()
        self._run(self._stmt(("listedput",), "INSERT INTO fabricjobs_schema (id, version) VALUES ('k2_jobs_live', ?)"),
                  (LISTING_SINCE,))
        if listed:
            log.info("listed the %d live jobs of keyspace %s in k2_jobs_live (new in schema version %d)", listed,
                     self.keyspace, LISTING_SINCE)

    def _list_indexed(self) -> int:
        """List every key the index has an entry for (an upgrade from before k2_jobs_live,
        listing.py: the index holds every live row, and reading it costs the live jobs, not the
        history). An entry of a row that is no longer live is met by readers as stale, and goes."""
        keys = sorted({e.key for e in self._scan(self._buckets(tuple(s for s in Status if not s.is_final), None))})
        rows = [r for r in self.get_many(keys) if r is not None and not r.archived]
        self._send([self._listed_write(r) for r in rows], bounded=False)
        return len(rows)

    def schema_version(self) -> int:
        return self._schema.version() or 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._clock.close()
        self._pool.shutdown(wait=True)
        self._cluster.shutdown()

    # -- time ------------------------------------------------------------------------------------

    def _sync_clock(self) -> None:
        """Measure Cassandra's time on the up hosts of this DC (clock.py)."""
        dc = self._placement.dc
        hosts = [h for h in self._cluster.metadata.all_hosts() if h.is_up is not False and (not dc or h.datacenter == dc)]

        def ask(host) -> float:
            row = self._session.execute("SELECT toTimestamp(now()) AS now FROM system.local", host=host,
                                        timeout=min(self.request_timeout, 2.0)).one()
            return _when(row["now"]).timestamp()

        self._clock.take(self._clock.measure(ask, hosts or [None]))

    def wall_time(self):
        return self._clock.now

    def clock_skew(self) -> float:
        return self._clock.skew

    # -- jobs: writes ----------------------------------------------------------------------------

    def insert_many(self, jobs: Sequence[Job]) -> list[CasResult]:
        """As :meth:`JobStore.insert_many`, but the inserts of a group go out concurrently (one
        by one, a script's 200 STARTJOBs were 400 round trips in a row: the submitter, not the
        cluster, bounded a bulk submit). To keep "the jobs after a refused one are not written"
        without a transaction, the keys are read first, at once. A group ends before a key that
        has a row or came earlier in ``jobs``; that one goes alone (it is refused, or reuses an
        archived row). Left open: a key created by another writer between that read and its
        LWT is refused while the jobs after it in its group were written; they are logged, and
        the results of the whole group are returned. A store error at one insert waits for the
        rest of its group, then raises InsertInterrupted naming that job and the jobs after it
        that were written all the same (the jobs before it are written)."""
        self._recheck_placement()  # once, before the group's inserts fan out
        results: list[CasResult] = []
        found = self.get_many([j.key for j in jobs]) if len(jobs) > 1 else [None] * len(jobs)
        i, seen = 0, set()
        while i < len(jobs):
            end = i + 1
            alone = found[i] is not None or jobs[i].key in seen
            seen.add(jobs[i].key)
            while not alone and end < len(jobs) and found[end] is None and jobs[end].key not in seen:
                seen.add(jobs[end].key)
                end += 1
            group = jobs[i:end]
            # Each its own intent, then its LWT; not all intents first: an intent is an entry
            # that nodes read and try to claim, in vain until its row is written.
            done = self._insert_group(group, i)
            refused = next((k for k, res in enumerate(done) if not res.applied), None)
            if refused is not None:
                written = [j.key for j, res in zip(group[refused + 1:], done[refused + 1:]) if res.applied]
                if written:
                    log.warning("STARTJOB of %s was refused (another writer created it just now); %d jobs after "
                                "it in the same group were written all the same: %s", group[refused].key,
                                len(written), ", ".join(map(str, written)))
                return results + done  # aligned with ``jobs``; the caller stops at the refused one
            results += done
            i = end
        return results

    def _insert_group(self, group: Sequence[Job], offset: int) -> list[CasResult]:
        """The results of the group's inserts, sent together; every one is waited for, so that
        a store error at one can say which of the others were written (InsertInterrupted). A
        failed insert counts as not applied when a refusal comes before it (the caller stops at
        the refusal); an error that is not the store's (a bug) is raised as it is."""
        if len(group) == 1:
            return [self.insert(group[0])]
        done: list[CasResult] = []
        errors: dict[int, Exception] = {}
        for k, future in enumerate([self._pool.submit(self.insert, job) for job in group]):
            try:
                done.append(future.result())
            except Exception as exc:  # the others still land: wait for them all
                errors[k] = exc
                done.append(CasResult(False))
        if not errors:
            return done
        failed = min(errors)
        if not isinstance(errors[failed], StoreError):
            raise errors[failed]
        if any(not res.applied for res in done[:failed]):
            for k, error in errors.items():  # the refusal is what the caller reports: these only here
                log.warning("STARTJOB of %s failed after a refusal before it in its group: %s", group[k].key, error)
            return done
        after = [job.key for job, res in zip(group[failed + 1:], done[failed + 1:]) if res.applied]
        if after:
            log.info("STARTJOB of %s failed; written after it all the same: %s", group[failed].key,
                     ", ".join(map(str, after)))
        raise InsertInterrupted(group[failed].key, errors[failed], after,
                                [group[k].key for k in sorted(errors) if k != failed], offset + failed) from errors[failed]

    def _recheck_placement(self) -> None:
        """Before a write of a shell or web process, at most every PLACEMENT_RECHECK_SEC: the
        live nodes' data centres and levels against this process's (topology.py). It writes no
        node row, so no node can see it; checked only at open, a web process at LOCAL_SERIAL
        would go on writing beside nodes started in another DC since. A node checks itself
        (check_placement), with the rule that the younger of two nodes stops."""
        if not self._placement_due():
            return
        with self._placement_lock:  # one read for the threads of a group that meet it due at once
            if not self._placement_due():
                return
            try:
                peers = self._peers()
            except StoreError as exc:  # the nodes table cannot be read now: the job's own write may still go
                log.warning("could not re-read the nodes' data centres (%s): writing on the last check, trying again "
                            "in %.0f s", exc, _PLACEMENT_RETRY_SEC)
                self._placement_checked = time.monotonic() - PLACEMENT_RECHECK_SEC + _PLACEMENT_RETRY_SEC
                return
            topology.check_placement(self._placement, peers)
            self._placement_checked = time.monotonic()

    def _placement_due(self) -> bool:
        at = self._placement_checked
        return at is not None and time.monotonic() - at >= PLACEMENT_RECHECK_SEC

    def insert(self, job: Job) -> CasResult:
        self._recheck_placement()
        new = job.replace(revision=1)
        # Its index intent and its listing entry (listing.py), before the LWT, in one request.
        self._send([w for w in (self._entry_write(new, 1), self._listed_write(new)) if w is not None], bounded=True)
        # An UPDATE, not an INSERT: an INSERT writes a row marker that no later UPDATE ... USING
        # TTL covers, so an archived row would leave its key behind when its cells expire. The
        # condition "revision = null" holds exactly when no row (or only expired cells) is
        # there. Columns without a value are left unset: a bound null is a tombstone per cell.
        sets = ", ".join(f"{c} = ?" for c in _JOB_COLUMNS)
        stmt = self._stmt(("insert",), f"UPDATE k2_jobs SET {sets} WHERE type = ? AND name = ? AND uid = ? "
                                       "IF revision = null")
        params = tuple(_bound(getattr(new, c)) for c in _JOB_COLUMNS) + (job.key.type, job.key.name, job.key.uid)

        def ours(row: Job) -> bool:
            """Our write, whatever came after it: a node may claim (or even run) the job before
            the settling read, so the revision says nothing; creation time and arguments (with
            the session's scope) are what another writer's row of this key would not share
            (the creation time as stored: in whole milliseconds)."""
            return row.creation_time == as_stored(new).creation_time and row.arguments == new.arguments

        applied, lwt_row, settled = self._execute_lwt(stmt, params, job.key, ours, lambda row: row is None,
                                                      before_retry=lambda: self._index_upsert(new, 1))
        if applied:
            self._made_waiting(_job_bucket(new))
            return CasResult(True, row=settled or new)
        # A refused conditional UPDATE returns only the condition's column: read the row.
        existing = settled if settled is not None else self._select_job(job.key)
        # Drop our intent only if an existing row proves it false: the row is past revision 1, or
        # its entry is elsewhere (compared as stored: an identical insert that won wrote this
        # very entry). With no row to be seen, the same entry may be the intent of another
        # insert of this key still before its LWT; the grace rule removes it if it is orphaned.
        if existing is not None and (existing.revision, _slot(existing)) != (1, _slot(new)):
            self._tidy(_job_bucket(new), new.key, new.next_run, 1, repair=False)  # our intent describes no row
        if existing is None or not existing.archived:
            return CasResult(False, row=existing)
        # An archived row with this key: reuse it, counting on from its epoch, revision and counters.
        counters = {c: getattr(existing, c) for c in RUN_COUNTERS}
        reused = self.cas(existing, new.replace(epoch=existing.epoch + 1, revision=existing.revision, **counters))
        if reused.applied:
            return reused
        return CasResult(False, row=self._select_job(job.key))

    def cas(self, expected: Job, new: Job, *, whole: bool = False) -> CasResult:
        return self.cas_many([(expected, new)], whole=whole)[0]

    def cas_many(self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None, *,
                 whole: Whole = False) -> list[CasResult]:
        """Each change in three rounds, each round for all changes at once: the writes that
        must precede the LWTs (index intents, archive entries, history lines) in batches; the
        LWTs, concurrently; the writes that follow them (superseded entries deleted, a fenced
        run's history line taken back) in batches. A claim of 16 rows is then 2 batches and 16
        LWTs, not 32 plain writes and 16 LWTs."""
        results, changes = self._prepare_all(pairs, runs, whole)
        self._write_intents(changes)
        if len(changes) > 1:
            applied = list(self._pool.map(lambda ic: self._attempt(ic[1]), changes))
        else:
            applied = [self._attempt(c) for _, c in changes]
        self._send_quietly([w for _, c in changes for w in c.after])
        self._read_back([(i, c) for i, (_, c) in enumerate(changes)], applied, None)
        failed = next((res for res in applied if isinstance(res, StoreError)), None)
        if failed is not None:
            # The caller sends the group again (cas_each: a pair at a time). The outcomes that
            # applied here are then re-sends, known as such (see _apply): reported applied, with
            # their history lines, not taken for writes another change beat.
            for (_, c), res in zip(changes, applied):
                if c.whole and c.record is not None and isinstance(res, CasResult) and res.applied:
                    self._unsettled.add(c.sent)
            raise failed
        for (i, _), res in zip(changes, applied):
            assert isinstance(res, CasResult)
            results[i] = res
        return results  # type: ignore[return-value]

    def cas_each_within(self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None,
                        on_error: Callable[[Job], None] = lambda expected: None, *, whole: Whole = False,
                        patience: float) -> "list[CasResult | None | Future[CasResult]]":
        """cas_many's rounds, but the answer waits for the LWTs only while they answer (until
        none has for ``patience``, _wait_while_answering): a change still under way then is
        returned as its Future (its LWT settles as any other, rows.py), and
        the writes after it go out when it is done. Those of the changes that answered go out
        together, in batches, as cas_many's do."""
        if not pairs:
            return []
        try:
            results, changes = self._prepare_all(pairs, runs, whole)
            self._write_intents(changes)
        except Exception:  # a pair at a time, as cas_each does (nothing was sent)
            return list(self.cas_each(pairs, runs, on_error, whole=whole))
        out: list = list(results)
        began = time.monotonic()
        tasks = [(i, c, self._pool.submit(self._apply, c)) for i, c in changes]
        _wait_while_answering([f for _, _, f in tasks], patience)
        took = time.monotonic() - began
        after = []
        answered: list[tuple[int, _Change]] = []
        for i, c, f in tasks:
            if not f.done():
                answer: Future[CasResult] = Future()
                f.add_done_callback(functools.partial(self._tidy_after, c, answer))  # (at once if done by now)
                out[i] = answer
                continue
            after += c.after
            try:
                out[i] = f.result()
                answered.append((i, c))
            except Exception:
                on_error(c.expected)
        # The read is given as long as the writes took: on a cluster slow all over, claims whose
        # rows are late to read back are not stragglers (their passengers would be given back).
        self._read_back(answered, out, on_error, max(patience, took))
        self._send_quietly(after)
        return out

    def _read_back(self, changes: "list[tuple[int, _Change]]", results: list,
                   on_error: Callable[[Job], None] | None, patience: float | None = None) -> None:
        """The rows of the applied changes that came back without theirs (an LWT that applies
        returns no row), read together once the group's writes have answered. With ``patience``
        (cas_each_within: the node's loop waits) the read runs on the store's pool and is
        waited for that long; if it has not answered by then, those results become Futures
        answered when it does, as writes that straggle. A read that fails is tried again
        (_read_again: the change applied, and a run waits for its row); one that fails still,
        or finds no row, makes the result an error, as a failed write's (``on_error``:
        reported, and the result None)."""
        wanted = [(i, c) for i, c in changes
                  if isinstance(results[i], CasResult) and results[i].applied and results[i].row is None]
        if not wanted:
            return
        keys = [c.key for _, c in wanted]
        rows: list[Job | None] | None = None
        error: BaseException | None = None
        if patience is None:
            try:
                rows = self._read_again(keys)
            except StoreError as exc:
                error = exc
        else:
            task = self._pool.submit(self._read_again, keys)
            if not wait([task], timeout=patience).done:
                self._read_back_late(task, [c for _, c in wanted], [i for i, _ in wanted], results)
                return
            error = task.exception()
            rows = None if error else task.result()
        for (i, c), answer in zip(wanted, _read_answers([c for _, c in wanted], rows, error)):
            if isinstance(answer, CasResult) or on_error is None:
                results[i] = answer
            else:
                on_error(c.expected)
                results[i] = None

    def _read_again(self, keys: list[JobKey]) -> "list[Job | None]":
        """get_many, tried again after a pause while it fails (a read timed out on a host under
        load): the rows of changes that applied, whose runs must not be left unstarted for it."""
        for pause in _READ_AGAIN_PAUSES:
            try:
                return self.get_many(keys)
            except StoreError:
                time.sleep(pause)
        return self.get_many(keys)

    @staticmethod
    def _read_back_late(task: "Future[list[Job | None]]", changes: "list[_Change]", places: list[int],
                        results: list) -> None:
        """The results at ``places`` become Futures answered by ``task``, a read still going on."""
        late: list[Future[CasResult]] = [Future() for _ in places]
        for i, future in zip(places, late):
            results[i] = future

        def answered(done: "Future[list[Job | None]]") -> None:
            error = done.exception()
            for future, answer in zip(late, _read_answers(changes, None if error else done.result(), error)):
                if isinstance(answer, CasResult):
                    future.set_result(answer)
                else:
                    future.set_exception(answer)

        task.add_done_callback(answered)

    def _tidy_after(self, c: "_Change", answer: "Future[CasResult]", done: "Future[CasResult]") -> None:
        """A straggling change is done: its writes after the LWT go out (and an applied one's
        row is read back), then ``answer`` tells the caller, who may write the same cells next
        (an outcome that lost is decided and its history line written again: the line's
        take-back must land first)."""
        self._send_quietly(c.after)
        exc = done.exception()
        if exc is not None:
            answer.set_exception(exc)
            return
        results: list = [done.result()]
        try:
            self._read_back([(0, c)], results, None)
        except Exception as exc:  # (a bug: the caller's answer must still come)
            results[0] = exc
        if isinstance(results[0], Exception):
            answer.set_exception(results[0])
        else:
            answer.set_result(results[0])

    def _prepare_all(self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None,
                     whole: Whole) -> tuple[list[CasResult | None], list[tuple[int, "_Change"]]]:
        """The results known without an LWT (a row already changed), and the changes to send."""
        self._recheck_placement()
        records = list(runs) if runs is not None else [None] * len(pairs)
        results: list[CasResult | None] = [None] * len(pairs)
        changes: list[tuple[int, _Change]] = []
        for i, ((expected, new), record, flag) in enumerate(zip(pairs, records, each_whole(whole, len(pairs)))):
            prepared = self._prepare(expected, new, record, flag)
            if isinstance(prepared, CasResult):
                results[i] = prepared
            else:
                changes.append((i, prepared))
        return results, changes

    def _write_intents(self, changes: list[tuple[int, "_Change"]]) -> None:
        """The writes that must precede the changes' LWTs, for all of them at once."""
        self._send([w for _, c in changes for w in c.before], bounded=True)
        for _, c in changes:
            if c.new_bucket is not None:
                self._seen[(c.new_bucket, c.key, c.revision)] = (None, self._monotonic())  # our own: fresh

    def _attempt(self, c: "_Change") -> "CasResult | StoreError":
        try:
            return self._apply(c)
        except StoreError as exc:
            return exc

    def _prepare(self, expected: Job, new: Job, record: RunRecord | None, whole: bool = False) -> "_Change | CasResult":
        if new.key != expected.key:
            raise ValueError(f"CAS cannot change a key: {expected.key} -> {new.key}")
        key = expected.key
        revision = expected.revision + 1
        full = expected.archived or new.archived
        stored = None
        if full:
            # A write that archives, un-archives or touches an archived row rewrites every cell,
            # so that one TTL covers all of them (or is lifted from all of them) and they expire
            # together: the row then leaves nothing behind. Merge the change into the stored row:
            # ``expected`` itself when it is a whole row (the LWT's condition on its revision
            # then proves nothing else changed); an index candidate is read first.
            stored = expected if expected.creation_time != _EPOCH0 else self._select_job(key)
            if stored is None or Version.of(stored) != Version.of(expected):
                current = None if stored is None else Version.of(stored)
                self._repair(expected, current)
                return CasResult(False, current=current)
            changes = {c: getattr(new, c) for c in _JOB_COLUMNS if getattr(new, c) != getattr(expected, c)}
            target = stored.replace(**changes)
            columns = [c for c in _JOB_COLUMNS if c != "revision"]
        else:
            target = new
            columns = [c for c in _JOB_COLUMNS if c != "revision" and getattr(new, c) != getattr(expected, c)]
        target = target.replace(revision=revision)
        ttl = self.archive_ttl if target.archived else 0
        sets = ", ".join(f"{c} = ?" for c in columns + ["revision"])
        stmt = self._stmt(("cas",) + tuple(columns),
                          f"UPDATE k2_jobs USING TTL ? SET {sets} WHERE type = ? AND name = ? AND uid = ? "
                          "IF status = ? AND epoch = ? AND worker_id = ? AND revision = ?")
        # A null clears a cell (a cell tombstone): bound only where the stored row has a value.
        values = [_bound(getattr(target, c)) if stored is not None and getattr(stored, c) is None
                  else getattr(target, c) for c in columns] + [revision]
        params = tuple(v.value if isinstance(v, Status) else v for v in values)
        params = (ttl,) + params + (key.type, key.name, key.uid, expected.status.value, expected.epoch,
                                    expected.worker_id, expected.revision)
        change = _Change(expected, target, revision, full, stmt, params, _job_bucket(target), record,
                         # An index candidate (no creation time) is never whole, whatever the caller says.
                         whole=whole and expected.creation_time != _EPOCH0, written=tuple(columns))
        # Before the LWT: the intent; the archive entry, so that the moment the row is archived
        # JOBSTATUS n DAYS AGO can find it (readers check the row, so an entry whose LWT fails
        # is inert); the history line, so that whoever sees the outcome (WAITJOB, then JOBLOG)
        # finds its run (a writer whose LWT loses takes it back: a fenced run records nothing).
        change.before = [w for w in (self._entry_write(target, revision),
                                     self._archive_write(target) if target.archived else None) if w is not None]
        if expected.archived and not target.archived:
            change.before.append(self._listed_write(target))  # a new life: listed before it is (listing.py)
        if record is not None:
            change.before += self._run_writes(record)
        return change

    def _apply(self, c: "_Change") -> CasResult:
        """The LWT of a prepared change, and what it leaves to tidy (``c.after``)."""
        key, target, expected, revision = c.key, c.target, c.expected, c.revision

        def ours(row: Job) -> bool:
            return (row.revision, row.status, row.worker_id, row.epoch) == (revision, target.status, target.worker_id, target.epoch)

        sent = c.sent
        try:
            applied, lwt_row, settled = self._execute_lwt(
                c.stmt, c.params, key, ours, lambda row: row is not None and Version.of(row) == Version.of(expected),
                before_retry=lambda: self._index_upsert(target, revision))
        except StoreError:
            if c.whole and c.record is not None:  # an outcome the caller keeps and sends again
                self._unsettled.add(sent)
            raise
        resent = sent in self._unsettled
        self._unsettled.discard(sent)
        current = _current(settled, lwt_row)
        if not applied and resent and current is not None and ours_whole(self._select_job(key, serial=True), target):
            # This very change, sent before without an answer, applied then: the row holds
            # every value it wrote. Ours, and so is the history line written before it.
            applied, settled = True, None
        if applied:
            self._tidy(_job_bucket(expected), key, expected.next_run, expected.revision, repair=False, later=c.after)
            if target.archived and not expected.archived:
                c.after.append(self._unlisted_write(key, life_of(target)))
            if expected.archived != target.archived and key.type == JobType.INTERFACE_LISTENER.value:
                self._marks_follow(key, self.archive_ttl if target.archived else 0)
            if c.new_bucket is not None:
                self._seen.pop((c.new_bucket, key, revision), None)
                self._made_waiting(c.new_bucket)
            row = settled if c.full is False and settled is not None else None
            if row is None and (c.full or c.whole):
                row = as_stored(target)
            return CasResult(True, row=row)  # (row None: read back with the group's, _read_back)
        # A re-sent one keeps its line: its first send may have applied before the row moved on,
        # and the line is then the run's own; a fenced run's line is the lesser wrong. So does
        # one whose unknown outcome a read found past the revision it makes (applied, then moved
        # on, cannot be told from beaten by another change).
        moved_on = settled is not None and settled.revision > revision
        if c.record is not None and not resent and not moved_on:
            c.after += self._unrun_writes(c.record)
        # Our intent stays only if the row now is exactly what it describes (someone made the
        # same change first); otherwise it is dropped. Unlike a reader's, this delete needs no
        # grace: the entry is ours (its bucket carries our target's owner, due time and
        # revision), and leaving it would let it outlive a different change to that revision.
        if c.new_bucket is not None and not (
            current is not None and current.revision == revision
            and _bucket(current.status, current.worker_id, False, target.blocked, target.priority) == c.new_bucket
        ):
            self._tidy(c.new_bucket, key, target.next_run, revision, repair=False, later=c.after)
        self._repair(expected, current, later=c.after)
        return CasResult(False, current=current)


def _read_answers(changes: "Sequence[_Change]", rows: "Sequence[Job | None] | None",
                  error: BaseException | None) -> "list[CasResult | Exception]":
    """What each applied change whose row was read back answers: its row as the change left
    it, or the error."""
    out: list[CasResult | Exception] = []
    for k, c in enumerate(changes):
        key, row = c.key, rows[k] if rows is not None else None
        if row is not None:
            out.append(CasResult(True, row=row if row.revision == c.revision else _as_left(row, c)))
        elif isinstance(error, Exception):
            out.append(error if isinstance(error, StoreError) else StoreError(f"Cassandra: reading {key} back: {error}"))
        else:
            out.append(StoreError(f"Cassandra: the row of {key} was not found after its change applied"))
    return out


#: The pauses before a failed read of applied changes' rows is tried again (_read_again).
_READ_AGAIN_PAUSES = (0.2, 1.0)


def _as_left(read: Job, c: "_Change") -> Job:
    """The row as ``c`` left it, from a read that found another change after it (a node quick
    to stop, restart or update a job it has just seen claimed): the cells ``c`` wrote and those
    its expected row carried, as ``c`` had them; only the rest (arguments, counters: what a
    claim candidate does not carry) as read. The run of a claim is then the one claimed: its
    due time and epoch, and not a later change's (which the run sees as any other)."""
    kept = {name: getattr(c.target, name) for name in (*c.written, *CANDIDATE_FIELDS, "archived")}
    return as_stored(read.replace(**kept, revision=c.revision))


#: The longest cas_each_within waits for a group whose writes keep answering: an LWT sent to
#: a host that froze is not answered before LWT_TIMEOUT (4 s) anyway.
_GROUP_WAIT_MAX = 4.0


def _wait_while_answering(futures: "list[Future[CasResult]]", patience: float, *,
                          monotonic: Callable[[], float] = time.monotonic, wait_for=wait) -> None:
    """Wait for ``futures`` until all are done, or none has been for ``patience`` seconds (at
    most _GROUP_WAIT_MAX). A write straggles when it is slower than its group, not when the
    whole group is slow: on three Cassandra nodes under load a group of claims took over 0.5 s
    to answer, and a fixed wait left most of it to be answered late (its passengers then given
    back, claimed again: 7 LWTs a job instead of 3)."""
    pending = set(futures)
    end = monotonic() + _GROUP_WAIT_MAX
    while pending:
        done, pending = wait_for(pending, timeout=min(patience, end - monotonic()), return_when=FIRST_COMPLETED)
        if not done or monotonic() >= end:
            return


def _current(settled: Job | None, lwt_row: dict | None) -> Version | None:
    """The row's version after an LWT: from the SERIAL read that settled it, or from the
    columns a refused LWT returned (None: no row, or not known)."""
    if settled is not None:
        return Version.of(settled)
    if lwt_row is not None and lwt_row.get("status") is not None:
        return Version(_STATUS[lwt_row["status"]], lwt_row["epoch"], lwt_row["worker_id"], lwt_row["revision"])
    return None


def ours_whole(row: Job | None, target: Job) -> bool:
    """Whether ``row`` holds every value of the whole row ``target`` wrote (as stored)."""
    return row is not None and all(getattr(row, c) == getattr(as_stored(target), c) for c in _JOB_COLUMNS)
