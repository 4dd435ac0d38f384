"""The release a user installs: ``python -m build`` makes an sdist and a wheel that ``twine
check`` accepts; the wheel holds the product only; installed into a fresh venv outside the
checkout, it runs the quick start of docs/get-started/install.md (``fabricjobs init``, a node,
a job) with nothing of the checkout on its path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fabricjobs import __version__
from testkit.rig import NodeProcess, wait_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel, built once for the module (no build isolation: the test extras
    hold the build backend, so nothing is fetched)."""
    pytest.importorskip("build")
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing that points into the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "FABRICJOBS_CONFIG")}
    env.update(extra)
    return env


def test_the_sdist_and_wheel_pass_twine_check_and_the_wheel_holds_the_product_only(dist):
    files = sorted(p.name for p in dist.iterdir())
    assert files == [f"fabricjobs-{__version__}-py3-none-any.whl", f"fabricjobs-{__version__}.tar.gz"], files
    pytest.importorskip("twine")
    r = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    names = zipfile.ZipFile(next(dist.glob("*.whl"))).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"fabricjobs", f"fabricjobs-{__version__}.dist-info"}, tops
    assert "fabricjobs/_grammar/fabricjobs.lark" in names
    assert {"fabricjobs/_examples/jobs/Customer.py", "fabricjobs/_examples/process_jobs/echoArg.sh"} <= set(names)
    assert not [n for n in names if "testing" in n or "testkit" in n or "cqlserver" in n or "__pycache__" in n]


def test_the_wheel_in_a_fresh_venv_outside_the_checkout_runs_the_quick_start(dist, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=_clean_env())
    py, fj = venv / "bin" / "python", venv / "bin" / "fabricjobs"
    wheel = next(dist.glob("*.whl"))
    # Its dependencies come from the package index (or pip's cache), as for any user.
    r = subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)],
                       capture_output=True, text=True, timeout=600, env=_clean_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    home = tmp_path / "host"
    home.mkdir()
    env = _clean_env()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(fj), *args], capture_output=True, text=True, timeout=120, cwd=home, env=env)

    where = subprocess.run([str(py), "-c", "import fabricjobs; print(fabricjobs.__file__)"], capture_output=True,
                           text=True, cwd=home, env=env).stdout.strip()
    assert where.startswith(str(venv)), where  # the wheel's, not the checkout's
    assert run("init", "fj", "--examples").returncode == 0  # the guides' jobs too, from the wheel
    config = str(home / "fj" / "config.ini")
    version = run("--config", config, "--version")
    assert version.returncode == 0 and version.stdout.startswith(f"fabricjobs {__version__}\n"), version.stderr
    node = NodeProcess(
        "n1", subprocess.Popen([str(fj), "--config", config, "node", "--name", "n1"], cwd=home, env=env,
                               stdout=open(tmp_path / "n1.log", "wb"), stderr=subprocess.STDOUT,
                               start_new_session=True),
        tmp_path / "n1.log")
    try:
        wait_for(lambda: node.alive() and "node n1 started" in node.log(), 60, "the node to start")
        started = run("--config", config, "shell", "-e",
                      "startjob user_job name='Hello.hello' uid='h1' args='{\"who\": \"the wheel\"}';")
        assert started.returncode == 0, started.stderr
        wait_for(lambda: "PROCESSED" in run("--config", config, "shell", "-e",
                                            "jobstatus user_job 'Hello.hello' with uid='h1';").stdout,
                 60, "Hello.hello to run on the installed node")
        log = run("--config", config, "shell", "-e", "joblog user_job 'Hello.hello' with uid='h1';")
        assert "hello, the wheel (1 of 1)" in log.stdout, log.stdout + log.stderr
        # The first recurring job of the docs (docs/get-started/first-recurring-job.md) runs as written.
        recurring = run("--config", config, "shell", "-e", "startjob user_job name='Customer.userJob1' uid='every5' "
                                                           "exec_interval='00:00:05' args='{\"loopsIterationCount\":\"3\"}';")
        assert recurring.returncode == 0, recurring.stderr
        wait_for(lambda: "Loop executed 3 times" in run("--config", config, "shell", "-e",
                                                         "jobhistory user_job 'Customer.userJob1' with uid='every5';").stdout,
                 60, "Customer.userJob1's first run on the installed node")
    finally:
        node.end()
    shutil.rmtree(venv, ignore_errors=True)
