"""The console's page cache (fabricjobs/web/console_data.py): browsers that ask for the same page
while it is being read wait for that one read, so ten watching browsers cost the store about
what one does (scripts/bench.py web prints the figure); a failed read fails its waiters too and
is not kept."""

from __future__ import annotations

import threading

from fabricjobs.errors import StoreError
from fabricjobs.web.console_data import PageCache


def _ask_at_once(cache: PageCache, read, askers: int = 10) -> list:
    answers: list = []
    go = threading.Barrier(askers)

    def ask() -> None:
        go.wait()
        try:
            answers.append(cache.get(("jobs", ""), read))
        except StoreError as exc:
            answers.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(askers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return answers


def test_a_page_asked_for_by_ten_browsers_at_once_is_read_once():
    reads = []
    release = threading.Event()

    def read() -> dict:
        reads.append(1)
        release.wait(0.5)  # a slow store: the other nine come while it reads
        return {"jobs": len(reads)}

    answers = _ask_at_once(PageCache(ttl=60), read)
    assert len(reads) == 1 and answers == [{"jobs": 1}] * 10


def test_a_failed_read_fails_those_waiting_for_it_and_the_next_ask_reads_again():
    reads = []

    def failing() -> dict:
        reads.append(1)
        threading.Event().wait(0.3)
        raise StoreError("the store is away")

    cache = PageCache(ttl=60)
    answers = _ask_at_once(cache, failing)
    assert len(reads) == 1 and all(isinstance(a, StoreError) for a in answers) and len(answers) == 10
    assert cache.get(("jobs", ""), lambda: {"jobs": "again"}) == {"jobs": "again"}


def test_an_expired_page_is_read_again():
    cache = PageCache(ttl=0.0)
    assert cache.get("k", lambda: {"n": 1}) == {"n": 1}
    assert cache.get("k", lambda: {"n": 2}) == {"n": 2}
