"""The status table (docs/explanation/architecture.md), as the code holds it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fabricjobs.model import (
    FINAL_STATUSES, TRANSITIONS, Event, Job, JobKey, Status, TransitionError, advance,
)

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
S = Status

# (from, event, to) exactly as the SPEC's table reads; None = no row / archived row.
SPEC_TABLE = [
    ({None, S.TERMINATED, S.PROCESSED, S.FAILED}, Event.START, S.WAITING),
    ({None, S.TERMINATED, S.PROCESSED, S.FAILED}, Event.START_SCHEDULED, S.SCHEDULED),
    ({S.SCHEDULED}, Event.DUE, S.WAITING),
    ({S.WAITING}, Event.CLAIM, S.IN_PROCESS),
    ({S.IN_PROCESS}, Event.DONE_ONCE, S.PROCESSED),
    ({S.IN_PROCESS}, Event.DONE_RECURRING, S.SCHEDULED),
    ({S.IN_PROCESS}, Event.FAIL_RETRY, S.WAITING),
    ({S.IN_PROCESS}, Event.FAIL_FINAL, S.FAILED),
    ({S.STOPPING}, Event.STOPPED, S.TERMINATED),
    ({S.RESTART}, Event.RESTARTED, S.WAITING),
    ({S.TERMINATED, S.PROCESSED, S.FAILED}, Event.RESUME, S.WAITING),
    ({S.TERMINATED, S.PROCESSED, S.FAILED}, Event.RESUME_SCHEDULED, S.SCHEDULED),
]


def job(status: Status, **kw) -> Job:
    return Job(JobKey("USER_JOB", "A.b", "u"), status, T, **kw)


@pytest.mark.parametrize("sources, event, target", SPEC_TABLE)
def test_spec_rows_are_allowed(sources, event, target):
    for source in sources:
        before = None if source is None else job(source, archived=source in FINAL_STATUSES)
        after = advance(before, event, job(target))
        assert after.status is target
        assert after.archived == (target in FINAL_STATUSES)


def test_stopjob_and_restartjob_reach_every_non_final_status():
    live = set(Status) - FINAL_STATUSES
    stop_sources = TRANSITIONS[Event.STOP].sources | TRANSITIONS[Event.STOP_IDLE].sources | {S.STOPPING}
    restart_sources = TRANSITIONS[Event.RESTART].sources | TRANSITIONS[Event.RESTART_IDLE].sources | {S.RESTART}
    # A HELD job has no run to restart: RESTARTJOB leaves it held (RELEASEJOB runs it).
    assert stop_sources == live and restart_sources == live - {S.HELD}


def test_held_jobs_are_started_held_held_when_idle_and_released_to_an_idle_status():
    assert advance(None, Event.START_HELD, job(S.HELD)).status is S.HELD
    for s in (S.WAITING, S.SCHEDULED):
        assert advance(job(s), Event.HOLD, job(S.HELD)).status is S.HELD
        assert advance(job(S.HELD), Event.UNHOLD, job(s)).status is s
    for s in (S.IN_PROCESS, S.STOPPING, S.RESTART):  # a run going on is never held
        with pytest.raises(TransitionError):
            advance(job(s), Event.HOLD, job(S.HELD))
    for event in (Event.CLAIM, Event.DUE, Event.TAKEOVER):  # never claimed, fired or taken over
        with pytest.raises(TransitionError):
            advance(job(S.HELD), event, job(S.IN_PROCESS if event is Event.CLAIM else S.WAITING))


def test_takeover_keeps_the_status_of_waiting_scheduled_and_running_jobs():
    for s in (S.WAITING, S.SCHEDULED, S.IN_PROCESS, S.STOPPING, S.RESTART):
        assert advance(job(s), Event.TAKEOVER, job(s)).status is s
        with pytest.raises(TransitionError):
            advance(job(s), Event.TAKEOVER, job(S.PROCESSED))


@pytest.mark.parametrize(
    "source, event, target",
    [
        (S.WAITING, Event.DONE_ONCE, S.PROCESSED),  # only a run can finish
        (S.PROCESSED, Event.CLAIM, S.IN_PROCESS),  # archived rows are never claimed
        (S.IN_PROCESS, Event.START, S.WAITING),  # STARTJOB on a live key
        (S.SCHEDULED, Event.RESUME, S.WAITING),  # RESUMEJOB only for archived jobs
        (S.IN_PROCESS, Event.UPDATE, S.WAITING),  # UPDATEJOB does not end runs
        (None, Event.CLAIM, S.IN_PROCESS),
    ],
)
def test_anything_else_is_refused(source, event, target):
    before = None if source is None else job(source)
    with pytest.raises(TransitionError):
        advance(before, event, job(target))


def test_archived_flag_follows_the_status():
    assert advance(job(S.IN_PROCESS), Event.FAIL_FINAL, job(S.FAILED)).archived
    assert not advance(job(S.PROCESSED, archived=True), Event.RESUME, job(S.WAITING, archived=True)).archived


def test_key_prints_as_in_the_seed():
    k = JobKey("USER_JOB", "Customer.userJob3", "uid3")
    assert str(k) == "USER_JOB.Customer.userJob3.uid3"
    assert k.describe() == "[type: USER_JOB, name: Customer.userJob3, uid: uid3]"
