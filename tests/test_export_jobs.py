"""``fabricjobs export-jobs``: a store's calendars and live jobs as a script that makes them
again on another store, whatever their parameters, and that may run twice
(docs/guides/operations/backup.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from fabricjobs.client import Client
from fabricjobs.config import load_config
from fabricjobs.export import export_script
from fabricjobs.model import JobKey, Status
from testkit.rig import write_config
from harness import TESTS

DEFINITION = ("affinity", "execution_interval", "depends_on", "time_zone", "late_threshold", "overlap", "late_action",
              "on_failure", "requestor", "calendar", "delete_on_success", "priority", "parallelism")

SETUP = """
createcalendar 'holidays' exclude '2026-12-25' exclude '* * * * sat,sun';
startjob user_job name='Probe.noop' uid='nightly' exec_interval='0 30 2 * * *' tz='Europe/Paris'
    late_threshold='00:10:00' late_action='RUN' overlap='QUEUE' requestor='payments' calendar='holidays'
    priority=7 affinity='DC1' on_failure='USER_JOB.Probe.noop';
startjob user_job name='Probe.echo' uid='parent' hold=true args='{"value": "it''s here", "n": 3}';
startjob user_job name='Probe.echo' uid='child' depends_on='USER_JOB.Probe.echo.parent' hold=true
    delete_on_success='out/a.tmp,out/b.tmp';
startjob process name='alloc.sh' uid='argv' args='{"0": "a b", "1": "--x=\\"y\\""}' exec_interval='01:00:00';
startjob user_job name='Probe.part' uid='bill' parallelism=3 args='{"log": "/dev/null"}';
"""


def _config(tmp_path, name, **jobs):
    root = tmp_path / "cleanup"
    root.mkdir(exist_ok=True)
    return write_config(tmp_path / f"{name}.ini", {
        "store": {"SQLITE_PATH": str(tmp_path / f"{name}.db")},
        "jobs": {"USER_JOBS_DIR": str(TESTS / "jobs"),
                 "PROCESS_JOBS_DIR": str(TESTS / "process"), "CLEANUP_ROOT": str(root), **jobs},
    })


def _definitions(client):
    jobs = {str(j.key): j for j in client.store.live_jobs() if not j.parallelism}
    out = {}
    for key, j in jobs.items():
        args = json.loads(j.arguments)
        args.pop("session_scope", None)
        out[key] = ({f: getattr(j, f) for f in DEFINITION}, args, j.status.name == "HELD")
    return out


def test_an_exported_script_makes_the_same_definitions_on_another_store_and_may_run_twice(tmp_path):
    a_cfg, b_cfg = _config(tmp_path, "a"), _config(tmp_path, "b")
    with Client.from_config(str(a_cfg)) as a:
        a.run_script(SETUP)
        script = export_script(a.store)
        want = _definitions(a)
        calendars = [(c.name, c.text) for c in a.store.calendars()]
    assert len(want) == 4
    assert "-- left out: USER_JOB.Probe.part.bill, a parallel job (PARALLELISM=3)" in script
    assert script.index("UID='parent'") < script.index("UID='child'")  # parents first
    with Client.from_config(str(b_cfg)) as b:
        b.run_script(script)
        assert _definitions(b) == want
        assert [(c.name, c.text) for c in b.store.calendars()] == calendars
        b.run_script(script)  # again: IF NOT EXISTS answers what is there, changes nothing
        assert _definitions(b) == want
        assert not [j for j in b.store.live_jobs() if j.parallelism]

    printed = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(a_cfg), "export-jobs"],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and printed.stdout == script, printed.stderr
    assert load_config(a_cfg)  # the config is untouched and still valid


def test_a_child_whose_parent_has_ended_is_exported_without_it_and_held_if_it_waited(tmp_path):
    """Ended parents are not exported, so the script names only the parents it makes: it runs on
    an empty store. A child that an ended parent kept waiting (TERMINATED) comes back HELD, with
    a comment that says why; one whose parent succeeded comes back as it was."""
    a_cfg, b_cfg = _config(tmp_path, "a"), _config(tmp_path, "b")
    with Client.from_config(str(a_cfg)) as a:
        a.run_script("startjob user_job name='Probe.noop' uid='gone-parent' hold=true;"
                     "startjob user_job name='Probe.noop' uid='waits' depends_on='USER_JOB.Probe.noop.gone-parent' "
                     "exec_interval='01:00:00';"
                     "stopjob user_job name='Probe.noop' uid='gone-parent';")
        script = export_script(a.store)
    assert ("-- USER_JOB.Probe.noop.waits: its parents USER_JOB.Probe.noop.gone-parent (TERMINATED) are not in this "
            "script; made HELD, as it waited for them: RELEASEJOB runs it") in script
    with Client.from_config(str(b_cfg)) as b:
        b.run_script(script)
        child = b.store.get(JobKey("USER_JOB", "Probe.noop", "waits"))
        assert child.status is Status.HELD and child.depends_on == "" and child.execution_interval == "01:00:00"


def test_jobs_a_node_started_itself_are_exported_and_made_again(tmp_path):
    """An ON_FAILURE or LATE_ACTION job and a listener's file job carry ARGS keys that the node
    gives them, which their function need not take (nor a PROCESS handler): the exported
    STARTJOBs of such live jobs must pass STARTJOB's checks when the script is restored."""
    from datetime import datetime, timezone

    from fabricjobs.model import Job
    from fabricjobs.node.decisions import failure_job, late_handler

    a_cfg, b_cfg = _config(tmp_path, "a"), _config(tmp_path, "b")
    now = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
    failed = Job(JobKey("USER_JOB", "Probe.noop", "f"), Status.FAILED, now, epoch=3, error_msg="no",
                 on_failure="USER_JOB.Probe.noop")
    late = Job(JobKey("USER_JOB", "Probe.noop", "l"), Status.SCHEDULED, now, next_run=now, late_action="PROCESS.fail.sh")
    made = [failure_job(failed, now), late_handler(late, now)]
    child = Job(JobKey("USER_JOB", "Probe.noop", "inbox/a.csv"), Status.WAITING, now, next_run=now,
                arguments=json.dumps({"file": "/in/a.csv", "name": "a.csv", "listener": "USER_JOB.Probe.noop.inbox",
                                      "version": "1-2-3"}))
    with Client.from_config(str(a_cfg)) as a:
        for job in [*made, child]:
            assert a.store.insert(job).applied
        script = export_script(a.store)
    with Client.from_config(str(b_cfg)) as b:
        b.run_script(script)
        assert {str(j.key) for j in b.store.live_jobs()} == {str(j.key) for j in [*made, child]}


def test_args_at_the_size_limit_or_with_an_escaped_lone_surrogate_are_exported_as_given(tmp_path):
    """ARGS were re-encoded with spaces after each comma and colon: ARGS within [jobs]
    MAX_ARGS_BYTES came out longer than it, and the restore refused them; and ``"\\ud800"``
    (an escape the JSON allows) came out as a lone surrogate, which no output can hold: the
    whole export failed with nothing written. The caller's own text is exported now."""
    limit = 2000
    configs = [_config(tmp_path, name, MAX_ARGS_BYTES=limit) for name in ("a", "b")]
    packed = json.dumps({"a": [0] * 1200}, separators=(",", ":"))[:limit - 20]
    packed = packed[:packed.rindex(",")] + "]}"
    assert limit - 30 < len(packed) <= limit
    given = {"packed": packed, "odd": '{"a": "x\\ud800"}'}
    with Client.from_config(str(configs[0])) as a:
        for uid, args in given.items():
            a.fetch(f"startjob user_job name='Probe.echo' uid='{uid}' hold=true args='{args}';")
    printed = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(configs[0]), "export-jobs"],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    with Client.from_config(str(configs[1])) as b:
        b.run_script(printed.stdout)
        for uid, args in given.items():
            stored = json.loads(b.store.get(JobKey("USER_JOB", "Probe.echo", uid)).arguments)
            stored.pop("session_scope")
            assert stored == json.loads(args), uid
