"""Which code a job NAME may run (docs/guides/security.md): a job is a public function defined in
its own module, checked at STARTJOB without importing anything and again by the node on its own
configuration; the demo's PROCESS directory holds only the demo's script; a node refuses job
directories that other users may write to."""

from __future__ import annotations

import subprocess
import sys

import pytest

from backends import add_sections
from fabricjobs.client import Client
from fabricjobs.config import load_config
from fabricjobs.errors import ValidationError
from fabricjobs.jobs.registry import JobCatalog, JobResolutionError
from fabricjobs.model import Status
from fabricjobs.store import open_store
from harness import ROOT, Cluster

TASKS = """\
import os
from subprocess import run
system = os.system


def ok(n: int = 1):
    return {"n": n}


def _append(path, text):
    with open(path, "a") as f:
        f.write(text)


class Thing:
    pass
"""


@pytest.fixture
def jobpkg(tmp_path, monkeypatch):
    """An operator package on the path: its __init__ leaves a mark when it is imported."""
    root = tmp_path / "site"
    pkg = root / "jobpkg"
    pkg.mkdir(parents=True)
    mark = tmp_path / "imported"
    (pkg / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\n")
    (pkg / "tasks.py").write_text(TASKS)
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "jobpkg" or m.startswith("jobpkg.")]:
        monkeypatch.delitem(sys.modules, name)
    return root, mark


@pytest.fixture
def client(store_config, tmp_path, jobpkg):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "Ops.py").write_text(TASKS)
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": jobs, "USER_JOB_MODULES": "jobpkg"}})
    cfg = load_config(store_config)
    c = Client(open_store(cfg), cfg, owns_store=True)
    yield c
    c.close()


@pytest.mark.parametrize("name, why", [
    ("jobpkg.tasks:run", "'run' is not a function defined in jobpkg.tasks"),
    ("jobpkg.tasks:system", "'system' is not a function defined in jobpkg.tasks"),
    ("jobpkg.tasks:Thing", "'Thing' is not a function defined in jobpkg.tasks"),
    ("jobpkg.tasks:__class__", "'__class__' is private"),
    ("jobpkg.tasks:__builtins__", "'__builtins__' is private"),
    ("jobpkg.tasks:_append", "'_append' is private"),
    ("Ops.system", "defines no top-level function 'system'"),
    ("Ops.run", "defines no top-level function 'run'"),
    ("Ops._append", "'_append' is private"),
    ("Ops.Thing", "defines no top-level function 'Thing'"),
])
def test_only_a_modules_own_public_functions_are_jobs(client, jobpkg, name, why):
    with pytest.raises(ValidationError, match=why.replace("(", r"\(")):
        client.fetch(f"startjob user_job name='{name}' uid='x' args='{{\"args\": \"id\", \"shell\": true}}';")
    assert client.store.live_jobs() == []


def test_startjob_checks_a_package_job_without_importing_the_package(client, jobpkg):
    _, mark = jobpkg
    assert client.fetch("startjob user_job name='jobpkg.tasks:ok' uid='a';").first_row()["Status"] == "WAITING"
    assert client.fetch("startjob user_job name='Ops.ok' uid='b';").first_row()["Status"] == "WAITING"
    assert not mark.exists()  # jobpkg/__init__.py never ran in the shell's process
    with pytest.raises(ValidationError, match="module 'jobpkg.nothere' is not installed"):
        client.fetch("startjob user_job name='jobpkg.nothere:ok' uid='c';")


def test_the_worker_checks_again_whatever_the_shell_checked(tmp_path, jobpkg):
    """A shell may run on another config (a decoy USER_JOBS_DIR where Ops.system is a def);
    the node resolves the name on its own and refuses what is not a job there."""
    jobs = tmp_path / "nodejobs"
    jobs.mkdir()
    (jobs / "Ops.py").write_text(TASKS)
    catalog = JobCatalog(str(jobs), ("jobpkg",), "")
    for name, why in (("Ops.system", "not a function defined in"), ("Ops.run", "not a function defined in"),
                      ("Ops._append", "is private"), ("jobpkg.tasks:run", "not a function defined in"),
                      ("jobpkg.tasks:system", "not a function defined in"), ("jobpkg.tasks:Thing", "not a function")):
        with pytest.raises(JobResolutionError, match=why):
            catalog.load_user_job(name)
    assert catalog.load_user_job("Ops.ok")(n=3) == {"n": 3}
    assert catalog.load_user_job("jobpkg.tasks:ok")() == {"n": 1}


DECLARED = """\
from fabricjobs.jobs import context
from fabricjobs.jobs.context import job


@job
def declared(n: int = 1):
    return {"n": n}


@context.job
def also_declared():
    return "also"


def helper(path, text):
    with open(path, "a") as f:
        f.write(text)


def job_in_disguise():  # "@job" only in a comment is no declaration
    pass
"""


def test_with_require_job_decorator_only_declared_functions_are_jobs(store_config, tmp_path, jobpkg):
    root, _ = jobpkg
    (root / "jobpkg" / "declared.py").write_text(DECLARED)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "Tasks.py").write_text(DECLARED)
    settings = {"USER_JOBS_DIR": jobs, "USER_JOB_MODULES": "jobpkg", "REQUIRE_JOB_DECORATOR": "true"}
    add_sections(store_config, {"jobs": settings})
    cfg = load_config(store_config)
    with Client(open_store(cfg), cfg, owns_store=True) as c:  # STARTJOB, from the source
        for name in ("Tasks.declared", "Tasks.also_declared", "jobpkg.declared:declared"):
            assert c.fetch(f"startjob user_job name='{name}' uid='ok';").first_row()["Status"] == "WAITING"
        for name in ("Tasks.helper", "Tasks.job_in_disguise", "jobpkg.declared:helper"):
            with pytest.raises(ValidationError, match="is not declared a job .REQUIRE_JOB_DECORATOR is on"):
                c.fetch(f"startjob user_job name='{name}' uid='no';")
        assert {j.key.name for j in c.store.live_jobs()} == {"Tasks.declared", "Tasks.also_declared",
                                                              "jobpkg.declared:declared"}
    catalog = JobCatalog.from_config(cfg)  # the worker, on the node's configuration: the mark itself
    assert catalog.load_user_job("Tasks.declared")(n=2) == {"n": 2}
    assert catalog.load_user_job("jobpkg.declared:also_declared")() == "also"
    for name in ("Tasks.helper", "jobpkg.declared:helper"):
        with pytest.raises(JobResolutionError, match="is not declared a job"):
            catalog.load_user_job(name)
    assert JobCatalog(str(jobs), ("jobpkg",), "").load_user_job("Tasks.helper") is not None  # off: any public def


@pytest.mark.slow
def test_a_node_fails_a_job_a_decoy_shell_accepted_and_runs_nothing(tmp_path):
    node_jobs = tmp_path / "nodejobs"
    node_jobs.mkdir()
    (node_jobs / "Ops.py").write_text(TASKS)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "Ops.py").write_text("def system(command):\n    pass\n")
    (tmp_path / "c").mkdir()
    cluster = Cluster(tmp_path / "c", settings={"jobs": {"USER_JOBS_DIR": str(node_jobs), "MAX_TRIES": 1}})
    try:
        cluster.start_node("a")
        shell_config = cluster.tmp / "decoy.ini"
        shell_config.write_text(cluster.config_path.read_text().replace(str(node_jobs), str(decoy)))
        victim = tmp_path / "owned"
        command = f"touch {victim}"
        run = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(shell_config), "shell", "-e",
                              f"startjob user_job name='Ops.system' uid='d' args='{{\"command\": \"{command}\"}}';"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr  # the decoy config accepts it
        job = cluster.wait_job("USER_JOB", "Ops.system", "d", lambda j: j.status is Status.FAILED, 30)
        assert "not a function defined in" in job.error_msg
        assert not victim.exists()
    finally:
        cluster.stop_all()


def test_the_example_config_lets_process_jobs_run_the_demo_script_only():
    catalog = JobCatalog.from_config(load_config(ROOT / "examples" / "config.ini"))
    assert catalog.process_path("echoArg.sh").name == "echoArg.sh"
    for tool in ("run", "test", "cql-test-server", "../scripts/run"):
        with pytest.raises(JobResolutionError):
            catalog.process_path(tool)


@pytest.mark.parametrize("key", ["USER_JOBS_DIR", "PROCESS_JOBS_DIR"])
@pytest.mark.parametrize("mode, who", [(0o775, "its group"), (0o757, "every user"), (0o1777, "its group and every user")])
def test_a_node_refuses_to_start_on_a_job_directory_others_may_write_to(store_config, tmp_path, key, mode, who):
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    unsafe.chmod(mode)
    add_sections(store_config, {"jobs": {key: unsafe}})
    run = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(store_config), "node", "--name", "n"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert f"[jobs] {key} = {unsafe} is writable by {who}" in run.stderr and f"chmod go-w {unsafe}" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("mode, who", [(0o664, "its group"), (0o646, "every user")])
def test_a_job_file_others_may_write_to_is_refused_where_it_is_loaded(tmp_path, jobpkg, mode, who):
    """The directories are checked at node start; a file in them (or an allowlisted module)
    that others may write is as good as theirs: the node refuses to load it, and STARTJOB too."""
    jobs, procs = tmp_path / "nodejobs", tmp_path / "procs"
    jobs.mkdir()
    procs.mkdir()
    (jobs / "Ops.py").write_text(TASKS)
    (procs / "hello.sh").write_text("#!/bin/sh\necho hello\n")
    site, _ = jobpkg
    files = {"Ops.ok": jobs / "Ops.py", "jobpkg.tasks:ok": site / "jobpkg" / "tasks.py", "hello.sh": procs / "hello.sh"}
    for path in files.values():
        path.chmod(mode | 0o100)
    catalog = JobCatalog(str(jobs), ("jobpkg",), str(procs))
    for name, path in files.items():
        why = f"is writable by {who} \\(mode {mode | 0o100:o}\\).*chmod go-w {path}"
        load = catalog.process_path if name == "hello.sh" else catalog.load_user_job
        with pytest.raises(JobResolutionError, match=why):
            load(name)
        with pytest.raises(JobResolutionError, match=why):  # STARTJOB's check
            catalog.check("PROCESS" if name == "hello.sh" else "USER_JOB", name)
        path.chmod(0o755)
    assert catalog.load_user_job("Ops.ok")(n=3) == {"n": 3}
    assert catalog.load_user_job("jobpkg.tasks:ok")() == {"n": 1}
    assert catalog.process_path("hello.sh") == (procs / "hello.sh").resolve()


def test_a_job_under_a_subdirectory_others_may_write_to_is_refused(tmp_path, caplog):
    """A safe jobs directory with a shared folder in it: whoever may write the folder may put
    any file there (or swap one), so its jobs are refused, and so are a package's whose
    ``__init__.py`` (which the import runs first) others may write."""
    jobs, procs = tmp_path / "nodejobs", tmp_path / "procs"
    (jobs / "shared").mkdir(parents=True)
    (procs / "shared").mkdir(parents=True)
    (jobs / "shared" / "__init__.py").write_text("")
    (jobs / "shared" / "Evil.py").write_text(TASKS)
    (procs / "shared" / "evil.sh").write_text("#!/bin/sh\necho evil\n")
    for path in (jobs / "shared" / "Evil.py", jobs / "shared" / "__init__.py"):
        path.chmod(0o644)
    (procs / "shared" / "evil.sh").chmod(0o755)
    catalog = JobCatalog(str(jobs), (), str(procs))
    for folder in (jobs / "shared", procs / "shared"):
        folder.chmod(0o777)
    with caplog.at_level("WARNING", logger="fabricjobs.node"):
        catalog.check_directories()  # (at node start: the node starts, and says so once)
    assert f"[jobs] USER_JOBS_DIR has folders others may write to ({jobs / 'shared'})" in caplog.text
    assert f"[jobs] PROCESS_JOBS_DIR has folders others may write to ({procs / 'shared'})" in caplog.text
    with pytest.raises(JobResolutionError, match=f"{jobs / 'shared'} is writable by its group and every user"):
        catalog.check("USER_JOB", "shared.Evil.ok")
    with pytest.raises(JobResolutionError, match=f"{(procs / 'shared').resolve()} is writable by its group and every user"):
        catalog.process_path("shared/evil.sh")
    for folder in (jobs / "shared", procs / "shared"):
        folder.chmod(0o755)
    (jobs / "shared" / "__init__.py").chmod(0o666)
    with pytest.raises(JobResolutionError, match="__init__.py is writable by its group and every user"):
        catalog.load_user_job("shared.Evil.ok")
    (jobs / "shared" / "__init__.py").chmod(0o644)
    assert catalog.load_user_job("shared.Evil.ok")(n=2) == {"n": 2}
    assert catalog.process_path("shared/evil.sh") == (procs / "shared" / "evil.sh").resolve()
