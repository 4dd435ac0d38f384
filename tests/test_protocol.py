"""The worker protocol's values survive the pipe unchanged (they are pickled by value: see
fabricjobs/worker/protocol.py), enums as the very members the node compares with."""

from __future__ import annotations

import pickle

import pytest

from fabricjobs.jobs.context import FailMode
from fabricjobs.jobs.registry import JobCatalog
from fabricjobs.model import JobKey
from fabricjobs.worker.protocol import DONE, Outcome, OutcomeKind, RunSpec


@pytest.mark.parametrize("kind", list(OutcomeKind))
@pytest.mark.parametrize("mode", list(FailMode))
def test_an_outcome_comes_back_equal_with_its_enum_members(kind, mode):
    sent = (DONE, 12345, Outcome(kind, output='{"n": 1}', error="boom", mode=mode, exit_code=3, log="a\nb",
                                 elapsed=0.25))
    got = pickle.loads(pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL))
    assert got == sent
    assert got[2].kind is kind and got[2].mode is mode


def test_a_train_of_run_specs_comes_back_equal():
    catalog = JobCatalog("/jobs", ("examples",), "/process")
    train = [RunSpec(i, JobKey("USER_JOB", "Bench.noop", f"t{i}"), 2, "n1", '{"a": 1}', 3, 65536, catalog, 7,
                     not_before=1.5 if i else None, due=2.5, task_index=i, task_count=4) for i in range(4)]
    got = pickle.loads(pickle.dumps(train, protocol=pickle.HIGHEST_PROTOCOL))
    assert got == train
    assert got[0].catalog is got[1].catalog  # one catalog per message, not one per run
