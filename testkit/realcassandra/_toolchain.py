"""Finding Java and Maven, and resolving the Cassandra server's jars with Maven into a cache."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

DEFAULT_VERSION = "5.0.8"
POM = Path(__file__).resolve().parent / "pom.xml"
INSTALL_HINT = "install OpenJDK 17 and Maven (apt-get install openjdk-17-jre-headless maven)"
# Cassandra 5.0 runs on Java 11 and 17 only; the JVM flags this runner passes are the Java 17 set.
SUPPORTED_JAVA = (17,)


class CassandraError(RuntimeError):
    """Cassandra could not be resolved, started or stopped (the message says why)."""


def java_executable() -> str | None:
    """The java to run Cassandra with: $JAVA_HOME/bin/java when set (as bin/cassandra does), else
    the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_major(java: str) -> int | None:
    """The major version of ``java`` (8 for "1.8.0_x", 17 for "17.0.15"), None if it won't run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def available(version: str = DEFAULT_VERSION) -> str | None:
    """None when this machine can run a real Cassandra ``version`` (Java 17, and Maven unless its
    jars are cached already), else a one-line reason that says how to get them, for a pytest
    skip."""
    reason = java_problem()
    if reason is None and shutil.which("mvn") is None and not _complete(version):
        reason = f"no mvn on PATH: {INSTALL_HINT}"
    return reason


def java_problem() -> str | None:
    """Why the Java here cannot run Cassandra 5.0 (None when it can)."""
    java = java_executable()
    if java is None:
        return f"no java on PATH: {INSTALL_HINT}"
    major = java_major(java)
    if major not in SUPPORTED_JAVA:
        return (f"{java} is Java {major}, Cassandra 5.0 here needs Java 17: {INSTALL_HINT}, "
                "or point JAVA_HOME at a JDK 17")
    return None


def cache_root() -> Path:
    """$FABRICJOBS_CASSANDRA_CACHE, else $XDG_CACHE_HOME/fabricjobs, else ~/.cache/fabricjobs."""
    if os.environ.get("FABRICJOBS_CASSANDRA_CACHE"):
        return Path(os.environ["FABRICJOBS_CASSANDRA_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "fabricjobs"


def _home(version: str) -> Path:
    if not re.fullmatch(r"[0-9A-Za-z.\-]+", version):
        raise CassandraError(f"not a Cassandra version: {version!r}")
    return cache_root() / f"cassandra-{version}"


def _complete(version: str) -> bool:
    home = _home(version)
    return (home / "complete.json").is_file() and (home / "lib").is_dir()


def resolve(version: str = DEFAULT_VERSION) -> Path:
    """The directory holding cassandra-all ``version`` and all its runtime jars, fetched with Maven
    on first use into ``<cache_root>/cassandra-<version>/lib``.

    A marker file written last makes later calls instant and tells a complete copy from one an
    interrupted run left behind; a file lock serialises concurrent callers (pytest-xdist workers,
    several scripts) so only one runs Maven and none sees a half-copied directory.
    """
    home = _home(version)
    lib, marker = home / "lib", home / "complete.json"
    if _complete(version):
        return lib
    if shutil.which("mvn") is None:
        raise CassandraError(f"no mvn on PATH to fetch Cassandra {version}: {INSTALL_HINT}")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(version):  # another process finished while we waited
            return lib
        for stale in home.glob("lib.tmp-*"):  # left by an interrupted run (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = home / f"lib.tmp-{os.getpid()}"
        cmd = ["mvn", "-q", "-B", "-f", str(POM), f"-Dcassandra.version={version}",
               "dependency:copy-dependencies", f"-DoutputDirectory={tmp}"]
        try:
            run = subprocess.run(cmd, cwd=home, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired as e:
            raise CassandraError(f"Maven took over {e.timeout:.0f} s: {' '.join(cmd)}") from None
        jars = sorted(p.name for p in tmp.glob("*.jar")) if tmp.is_dir() else []
        if run.returncode != 0 or f"cassandra-all-{version}.jar" not in jars:
            tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-30:])
            shutil.rmtree(tmp, ignore_errors=True)
            raise CassandraError(f"Maven could not resolve cassandra-all {version} "
                                 f"(exit {run.returncode}): {' '.join(cmd)}\n{tail}")
        if lib.exists():
            shutil.rmtree(lib)
        tmp.rename(lib)
        marker_tmp = home / f"complete.json.tmp-{os.getpid()}"
        marker_tmp.write_text(json.dumps({"version": version, "jars": jars}, indent=1) + "\n")
        marker_tmp.rename(marker)
    return lib


def jamm_agent(lib: Path) -> Path:
    """The jamm jar, which Cassandra needs as a -javaagent to measure memtable sizes."""
    jars = sorted(lib.glob("jamm-*.jar"))
    if not jars:
        raise CassandraError(f"no jamm-*.jar in {lib}")
    return jars[-1]
