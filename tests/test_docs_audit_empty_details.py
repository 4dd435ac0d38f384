"""A record-per-block answer with no record (``JOBSTATUS ... DETAILS`` of no job) prints the
count alone, as psql's expanded display does, not a blank line before it
(docs/guides/watching-jobs.md)."""

from __future__ import annotations

import pytest


@pytest.fixture
def node_backend():
    """SQLite: how the shell prints is the same on every store."""
    return "sqlite"


def test_details_of_no_job_print_the_count_alone(cluster):
    for text in ("jobstatus user_job 'Customer.nothing' with uid='nope' details;", "jobstatus 1 days ago requestor 'nobody' details;"):
        r = cluster.shell("-e", text)
        assert (r.returncode, r.stdout, r.stderr) == (0, "(0 rows)\n", ""), text
