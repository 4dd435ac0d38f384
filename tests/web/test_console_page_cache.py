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


def test_a_change_through_this_web_process_makes_every_page_be_read_again():
    """A button's change is seen by the read right after it: not the page as it was up to an
    interval ago (Release said 'now SCHEDULED' over a title still HELD). A read that began
    before the change is not kept either."""
    cache = PageCache(ttl=60.0)
    reads = []

    def read() -> dict:
        reads.append(1)
        return {"reads": len(reads)}

    assert cache.get("job", read) == {"reads": 1} and cache.get("job", read) == {"reads": 1}
    cache.forget()
    assert cache.get("job", read) == {"reads": 2}

    def read_across_a_change() -> dict:
        cache.forget()  # (a change answered while this read was under way)
        return read()

    cache.get("other", read_across_a_change)
    assert cache.get("other", read) == {"reads": 4}  # read again, not what was read across the change


def test_a_request_that_may_change_something_empties_the_cache_before_its_answer_is_sent():
    import asyncio

    from fabricjobs.web.console_data import ForgetPagesOnChange

    cache = PageCache(ttl=60.0)
    seen: list = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message):
        seen.append((message["type"], cache.get("job", lambda: {"read": len(seen)})))

    middleware = ForgetPagesOnChange(app, cache)
    cache.get("job", lambda: {"read": "before"})
    asyncio.run(middleware({"type": "http", "method": "GET", "path": "/api/v1/jobs"}, None, send))
    assert seen[0][1] == {"read": "before"}  # a read: the page stays
    asyncio.run(middleware({"type": "http", "method": "POST", "path": "/api/v1/jobs"}, None, send))
    assert seen[2][1] != {"read": "before"}  # a change: read again by the time its answer starts

    async def refused(scope, receive, send):
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    kept = cache.get("job", lambda: {"read": "kept"})
    asyncio.run(ForgetPagesOnChange(refused, cache)({"type": "http", "method": "POST", "path": "/api/v1/jobs"}, None, send))
    assert cache.get("job", lambda: {"read": "again"}) == kept  # a refused request changed nothing: anyone may send one


def test_a_read_under_way_when_a_change_is_made_is_not_joined_after_it():
    """A browser's poll is often being read while a button's change is answered: the read
    after the change must not wait for that one and get the page as it was."""
    cache = PageCache(ttl=60.0)
    started, release = threading.Event(), threading.Event()
    answers: list = []

    def slow_read() -> dict:
        started.set()
        release.wait(5)
        return {"v": "before"}

    before = threading.Thread(target=lambda: answers.append(cache.get("job", slow_read)))
    before.start()
    started.wait(5)
    cache.forget()  # the change is answered while that read goes on
    after = cache.get("job", lambda: {"v": "after"})
    release.set()
    before.join(5)
    assert after == {"v": "after"} and answers == [{"v": "before"}]
    assert cache.get("job", lambda: {"v": "third"}) == {"v": "after"}
