"""ARGS that a job's function cannot take are refused at STARTJOB, naming the key and the
function's parameters, without importing the job's module in the shell's process; and a
changed job module always runs its new code, even after a same-size edit within the second
of the last import (docs/guides/run-isolation.md)."""

from __future__ import annotations

import json
import os
import py_compile
import textwrap

import pytest

from fabricjobs.model import Status
from harness import Cluster

pytestmark = pytest.mark.slow

JOBS = {
    "Typo.py": '''
        from pathlib import Path
        Path(__file__).with_name("imported").touch()  # what STARTJOB must never run

        def pay(amount: int, currency: str = "EUR", *, note: str = ""):
            return [amount, currency, note]

        def anything(**kwargs):
            return sorted(kwargs)

        ''',
    "Own.py": '''
        from fabricjobs.jobs.context import current_job

        def own_args():
            return sorted(current_job().args)  # reads its ARGS itself: any key may come

        def beside(n: int = 1):  # takes any key too: code of its module reads ARGS (which is not known)
            current_job().logger.info("beside")
            return n
        ''',
    "Greet.py": '''
        from fabricjobs.jobs.context import current_job

        def greet(who: str = "world"):
            job = current_job()  # for its log and stop flag only: its ARGS are its parameters
            if not job.is_aborted():
                job.logger.info("hello, %s", who)
            return who
        ''',
    "Edit.py": '''
        def which():
            return "old"
        ''',
    "Shop/__init__.py": "",
    "Shop/helpers.py": '''
        from fabricjobs.jobs.context import current_job

        def region():
            return current_job().args.get("region", "eu")  # a helper that reads the run's ARGS
        ''',
    "Shop/orders.py": '''
        from . import helpers

        def ship(order: int = 0):  # takes any key: code it imports from beside it reads ARGS
            return [order, helpers.region()]
        ''',
    "Shop/named.py": '''
        from .helpers import region

        def pack(box: int = 0):  # takes any key: the helper function it imports reads ARGS
            return [box, region(), region()]
        ''',
    "Shop/plain.py": '''
        import json

        def dump(n: int = 0):
            return json.dumps(n)
        ''',
}


@pytest.fixture
def cluster(request, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o755)
    for name, text in JOBS.items():
        (jobs / name).parent.mkdir(mode=0o755, exist_ok=True)
        (jobs / name).write_text(textwrap.dedent(text).lstrip())
    c = Cluster(tmp_path, settings={"jobs": {"USER_JOBS_DIR": str(jobs)}}, request=request)
    c.jobs = jobs
    c.start_node("a")
    yield c
    c.stop_all()


def test_an_args_key_that_names_no_parameter_is_refused_at_startjob(cluster):
    out = cluster.shell("-e", "startjob user_job name='Typo.pay' uid='t' args='{\"amount\": 5, \"curency\": \"USD\"}';")
    assert out.returncode == 1, out.stdout
    assert ("ARGS key 'curency' is not a parameter of pay() (its parameters: amount, currency, note); "
            "a function that takes other keys declares **kwargs") in out.stderr, out.stderr
    assert cluster.job("USER_JOB", "Typo.pay", "t") is None
    assert not (cluster.jobs / "imported").exists(), "STARTJOB ran the job's module in the shell's process"

    cluster.fetch("startjob user_job name='Typo.pay' uid='ok' args='{\"amount\": 5, \"note\": \"x\"}';")
    job = cluster.wait_job("USER_JOB", "Typo.pay", "ok", lambda j: j.archived)
    assert job.status is Status.PROCESSED and json.loads(job.output) == [5, "EUR", "x"], job.error_msg
    cluster.fetch("startjob user_job name='Typo.anything' uid='kw' args='{\"whatever\": 1}';")  # **kwargs takes any key
    assert json.loads(cluster.wait_job("USER_JOB", "Typo.anything", "kw", lambda j: j.archived).output) == ["whatever"]


def test_a_function_that_uses_its_job_handle_only_to_log_is_still_checked(cluster):
    """``current_job()`` for the log and the stop flag does not make a function take any key
    (the example job of ``fabricjobs init`` is such a one); reading ``.args`` does, and so does
    any code of the module that reads them (Own.py: which function calls it is not read)."""
    out = cluster.shell("-e", "startjob user_job name='Greet.greet' uid='g' args='{\"whom\": \"me\"}';")
    assert out.returncode == 1 and "ARGS key 'whom' is not a parameter of greet() (its parameters: who)" in out.stderr, \
        out.stderr
    assert cluster.job("USER_JOB", "Greet.greet", "g") is None
    cluster.fetch("startjob user_job name='Own.own_args' uid='o' args='{\"any\": 1}';")
    cluster.fetch("startjob user_job name='Own.beside' uid='b' args='{\"n\": 1, \"extra\": 2}';")
    assert json.loads(cluster.wait_job("USER_JOB", "Own.own_args", "o", lambda j: j.archived).output) == ["any"]


def test_a_function_whose_module_imports_a_helper_that_reads_args_takes_any_key(cluster):
    """A helper beside the job's module (in its package) that reads ``current_job().args``
    may be what the function calls, so the function is not checked; a module that imports
    nothing of the kind still is."""
    cluster.fetch("startjob user_job name='Shop.orders.ship' uid='s' args='{\"order\": 7, \"region\": \"us\"}';")
    job = cluster.wait_job("USER_JOB", "Shop.orders.ship", "s", lambda j: j.archived)
    assert job.status is Status.PROCESSED and json.loads(job.output) == [7, "us"], job.error_msg
    cluster.fetch("startjob user_job name='Shop.named.pack' uid='a' args='{\"box\": 2, \"region\": \"ap\"}';")
    job = cluster.wait_job("USER_JOB", "Shop.named.pack", "a", lambda j: j.archived)
    assert job.status is Status.PROCESSED and json.loads(job.output) == [2, "ap", "ap"], job.error_msg
    out = cluster.shell("-e", "startjob user_job name='Shop.plain.dump' uid='d' args='{\"m\": 1}';")
    assert out.returncode == 1 and "ARGS key 'm' is not a parameter of dump() (its parameters: n)" in out.stderr, out.stderr


def test_updatejob_args_are_checked_the_same_way(cluster):
    cluster.fetch("startjob user_job name='Typo.pay' uid='u' args='{\"amount\": 1}' exec_interval='01:00:00';")
    out = cluster.shell("-e", "updatejob user_job name='Typo.pay' uid='u' args='{\"amonut\": 2}';")
    assert out.returncode == 1 and "ARGS key 'amonut' is not a parameter of pay()" in out.stderr, out.stderr
    assert json.loads(cluster.job("USER_JOB", "Typo.pay", "u").arguments)["amount"] == 1


def test_a_same_size_edit_within_a_second_runs_the_new_code(cluster):
    """Python's bytecode cache trusts a source file of the same size and second: a worker that
    imported the old code (and cached it) must still run the new."""
    module = cluster.jobs / "Edit.py"
    second = (module.stat().st_mtime_ns // 1_000_000_000) * 1_000_000_000
    os.utime(module, ns=(second + 100_000_000, second + 100_000_000))
    py_compile.compile(str(module), doraise=True)  # the cache an import of it writes (whatever PYTHONDONTWRITEBYTECODE says)
    cluster.fetch("startjob user_job name='Edit.which' uid='1';")
    assert json.loads(cluster.wait_job("USER_JOB", "Edit.which", "1", lambda j: j.archived).output) == "old"

    text = module.read_text()
    module.write_text(text.replace('"old"', '"new"'))  # the same size
    os.utime(module, ns=(second + 200_000_000, second + 200_000_000))  # within the same second
    assert len(module.read_text()) == len(text)
    cluster.fetch("startjob user_job name='Edit.which' uid='2';")
    assert json.loads(cluster.wait_job("USER_JOB", "Edit.which", "2", lambda j: j.archived).output) == "new"
