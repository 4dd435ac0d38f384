"""Example jobs for INTERFACE_LISTENER: one run per new file in a watched directory.

    startjob interface_listener name='Files.count_lines' uid='inbox' args='{"path": "inbox", "pattern": "*.csv"}';
"""

from fabricjobs.jobs.context import current_job


def count_lines(file: str, name: str, listener: str):
    """Counts the lines of the file the listener found."""
    with open(file, encoding="utf-8", errors="replace") as f:
        lines = sum(1 for _ in f)
    current_job().logger.info("%s has %d lines", name, lines)
    return {"file": name, "lines": lines}
