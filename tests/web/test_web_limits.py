"""What one client may take of a web process (docs/guides/run-isolation.md), against a real
``fabricjobs web`` process and a real node: a 100 MB body is answered before it is read (401
without a token, 413 with one) and the process does not grow; 150 follows at once get their
share and a clear 429 for the rest while /healthz and /readyz answer within a second; a UID of
100,000 characters is refused in words; error bodies show no file path to a client without a
token; the login page's link fills the form in but never submits it."""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from fabricjobs.config import load_config
from fabricjobs.web.tokens import Role, TokenFile
from harness import wait_for
from web_site import running_site

pytestmark = pytest.mark.slow

MB = 1024 * 1024


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    """One site on SQLite: the limits are the web process's, whatever the store."""
    with running_site(request, tmp_path_factory.mktemp("web-limits")) as site:
        yield site


def _rss_kb(pid: int) -> int:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1))


def _post_huge(url: str, path: str, size: int, token: str | None) -> tuple[int, dict, int]:
    """POST a body of ``size`` bytes (declared, and sent a megabyte at a time until the server
    answers): its status, its JSON and how many bytes had been sent by then. As curl does, the
    request says ``Expect: 100-continue`` and the body waits a moment for an early answer: a
    server that closes with body bytes unread resets the connection, and the reset can drop
    its answer before the client reads it. (A server about to read the body asks for it with a
    100 Continue, which is then the answer this returns: the test's status check fails.) The
    answer is read by a thread of its own as it comes."""
    where = urlsplit(url)
    head = [f"POST {path} HTTP/1.1", f"Host: {where.netloc}", "Content-Type: application/json",
            f"Content-Length: {size}", "Expect: 100-continue"] + ([f"Authorization: Bearer {token}"] if token else [])
    sock = socket.create_connection((where.hostname, where.port), timeout=10)
    sent = 0
    answers: list[bytes] = []
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        reader = threading.Thread(target=lambda: answers.append(_answer(sock)), daemon=True)
        reader.start()
        reader.join(10.0)  # an early answer (or a 100 Continue) before any of the body is sent
        chunk = b" " * MB
        while sent < size and reader.is_alive():
            part = chunk[:size - sent]
            try:
                sock.sendall(part)
            except OSError:
                break  # the server has answered and closed
            sent += len(part)
        reader.join(10)
    finally:
        sock.close()
    return (*_status_and_body(answers[0]), sent)


def _answer(sock: socket.socket) -> bytes:
    """An HTTP answer read whole: its head and body may come in separate packets."""
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
        try:
            part = sock.recv(65536)
        except ConnectionResetError:
            break  # (after the answer, or in its place: the caller's parse says which)
        if not part:
            break
        answer += part
    return answer


def _status_and_body(answer: bytes) -> tuple[int, dict]:
    return int(answer.split(b" ", 2)[1]), json.loads(answer.split(b"\r\n\r\n", 1)[1])


def _length(answer: bytes) -> int:
    m = re.search(rb"content-length: (\d+)", answer, re.I)
    return int(m.group(1)) if m else 0


def test_a_100_mb_body_is_answered_before_it_is_read_and_the_process_does_not_grow(site):
    pid = site.web.proc.pid
    before = _rss_kb(pid)
    for path in ("/api/v1/jobs", "/api/v1/commands"):
        status, body, sent = _post_huge(site.web.url, path, 100 * MB, None)
        assert status == 401 and body["error"] == "Unauthorized", body
        assert sent < 20 * MB, f"{sent:,} bytes were taken before the answer"
    status, body, sent = _post_huge(site.web.url, "/api/v1/jobs", 100 * MB, site.tokens["operator"])
    assert status == 413 and body["message"] == ("the request body is 104,857,600 bytes long; at most 16,777,216 bytes "
                                                 "are allowed ([web] MAX_BODY_BYTES)"), body
    assert _rss_kb(pid) - before < 20 * 1024, f"the web process grew from {before} kB to {_rss_kb(pid)} kB"


def test_a_small_body_of_a_request_refused_401_is_read_first_so_the_answer_is_not_reset(site):
    """The 401 of an API request without a token came before its body was read, and the
    connection was closed: body bytes arriving after the close made the kernel reset the
    connection, which can drop the answer before the client reads it (httpx saw "connection
    reset by peer" in place of a 401, once). A small body is now read and dropped first."""
    where = urlsplit(site.web.url)
    body = json.dumps({"type": "USER_JOB", "name": "Probe.noop"}).encode()
    head = [f"POST /api/v1/jobs HTTP/1.1", f"Host: {where.netloc}", "Content-Type: application/json",
            f"Content-Length: {len(body)}"]
    sock = socket.create_connection((where.hostname, where.port), timeout=10)
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        early = select.select([sock], [], [], 0.5)[0]  # a slow client: its body comes a moment later
        sock.sendall(body)
        answer = _answer(sock)
    finally:
        sock.close()
    assert not early, "answered (and about to close) before the body it declared had come"
    status, data = _status_and_body(answer)
    assert status == 401 and data["error"] == "Unauthorized", answer


def _chunked(url: str, path: str, chunks: int) -> tuple[int, dict]:
    """POST ``chunks`` chunks of 12 KiB without a token (small: the server reads all of it, so
    closing after its answer resets nothing the answer is still on its way in)."""
    where = urlsplit(url)
    head = [f"POST {path} HTTP/1.1", f"Host: {where.netloc}", "Content-Type: application/x-www-form-urlencoded",
            "Transfer-Encoding: chunked"]
    sock = socket.create_connection((where.hostname, where.port), timeout=60)
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        for _ in range(chunks):
            if select.select([sock], [], [], 0)[0]:
                break  # answered already
            try:
                sock.sendall(b"%x\r\n" % (12 * 1024) + b"a" * (12 * 1024) + b"\r\n")
            except OSError:
                break
        try:
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # answered and closed already
        answer = _answer(sock)
    finally:
        sock.close()
    return _status_and_body(answer)


def test_an_anonymous_body_outside_the_api_is_small_and_a_stalled_one_is_not_held(site):
    """The login form takes a few hundred bytes: a client without a token or session may send
    16 KiB there, not the API's 16 MiB, and one that stops sending part way, in chunks or short
    of its Content-Length, is answered (408) rather than held (BODY_READ_SEC, 30 s, is the
    deadline)."""
    status, body = _chunked(site.web.url, "/login", 2)
    assert status == 413 and "at most 16,384 bytes are allowed (without a token or session)" in body["message"], body
    began = time.monotonic()
    where = urlsplit(site.web.url)
    head = f"POST /login HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    stalls = [head + "Transfer-Encoding: chunked\r\n\r\n5\r\nnonce\r\n", head + "Content-Length: 100\r\n\r\nnonce"]
    socks = [socket.create_connection((where.hostname, where.port), timeout=60) for _ in stalls]
    try:
        for sock, stall in zip(socks, stalls):
            sock.sendall(stall.encode())  # and nothing more
        for sock in socks:  # (both held at once: one deadline's wait for the two)
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 30 s" in answer, answer
    finally:
        for sock in socks:
            sock.close()
    assert 25 < time.monotonic() - began < 50


def test_a_uid_of_100k_characters_is_refused_in_words(site):
    answer = site.client("operator").post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "u" * 100_000})
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "UID is 100,000 characters long; at most 1,024 are allowed"


def _extra_tokens(site, n: int) -> list[str]:
    tokens = TokenFile(load_config(site.cluster.config_path).get("web", "TOKENS_FILE"))
    return [tokens.create(f"follower-{i}", Role.VIEWER) for i in range(n)]


@pytest.mark.timing  # /healthz within a second: one at a time, at normal CPU priority (scripts/test)
def test_150_follows_at_once_leave_health_and_short_requests_answered(site, tmp_path):
    """Each follow would hold a server thread for a minute: one token gets 8 of them, all
    tokens together 64, the rest a 429 that says why; /healthz, /readyz and a short request
    are answered within a second all along."""
    site.client("operator").post("/jobs", json={"type": "USER_JOB", "name": "Probe.started", "uid": "long",
                                                 "args": {"log": str(tmp_path / "started.log")}})
    job = "/jobs/USER_JOB/Probe.started/long/log"
    tokens = [site.tokens["viewer"]] * 30 + [t for t in _extra_tokens(site, 15) for _ in range(8)]  # 150
    answers: list[tuple[int, str]] = []
    release = threading.Event()

    def follow(token: str) -> None:
        with httpx.Client(base_url=site.web.url + "/api/v1", headers={"Authorization": f"Bearer {token}"},
                          timeout=90) as client:
            with client.stream("GET", job, params={"follow": "true", "timeout": 60}) as response:
                first = next(response.iter_lines(), "") if response.status_code == 200 else response.read().decode()
                answers.append((response.status_code, first))
                release.wait(70)

    threads = [threading.Thread(target=follow, args=(t,), daemon=True) for t in tokens]
    try:
        for t in threads:
            t.start()
        # Every request is answered (a stream, or 429), none left waiting for a thread...
        wait_for(lambda: len(answers) == len(tokens), 30, lambda: f"every follow to be answered ({len(answers)} so far)")
        # ... and while the admitted ones hold their threads, the rest of the API answers at once.
        for _ in range(10):
            for path in ("/healthz", "/readyz", "/api/v1/jobs?limit=1"):
                began = time.monotonic()
                got = httpx.get(site.web.url + path, timeout=5, headers={"Authorization": f"Bearer {site.tokens['viewer']}"})
                assert got.status_code == 200 and time.monotonic() - began < 1.0, (path, got.status_code,
                                                                                  time.monotonic() - began)
            time.sleep(0.05)
    finally:
        release.set()
    following = [a for a in answers if a[0] == 200]
    refused = [a for a in answers if a[0] == 429]
    assert len(following) + len(refused) == 150 and len(following) == 64, [a[0] for a in answers]
    assert "following (ends with the run)" in following[0][1]
    messages = {json.loads(text)["message"] for _, text in refused}
    assert ("token 'viewer-1' already has 8 long requests open (waits and follows), the most one token may have "
            "([web] MAX_WAITS_PER_TOKEN); try again when one has ended") in messages
    assert any("([web] MAX_WAITS)" in m for m in messages), messages
    site.client("operator").post("/jobs/USER_JOB/Probe.started/long/stop")


def test_error_bodies_show_no_file_path_to_a_client_without_a_token(site):
    refused = httpx.post(site.web.url + "/api/v1/commands", content=b'{"text": ""}', timeout=10)  # (a body, no token)
    status, body = refused.status_code, refused.json()
    tokens = Path(load_config(site.cluster.config_path).get("web", "TOKENS_FILE"))
    saved = tokens.read_bytes()
    try:
        tokens.write_text("{damaged")
        anonymous = httpx.get(site.web.url + "/api/v1/jobs", timeout=10, headers={"Authorization": "Bearer fjt_unknown"})
        assert anonymous.status_code == 500 and "is damaged" in anonymous.json()["message"]
        assert str(tokens.parent) not in anonymous.text and "<path>" in anonymous.text, anonymous.text
    finally:
        tokens.write_bytes(saved)
    assert status == 401 and "/" not in body["message"].replace("Authorization: Bearer", "")


def test_the_login_link_fills_the_form_in_but_never_logs_in_by_itself(site):
    script = httpx.get(site.web.url + "/static/login.js", timeout=10).text
    assert "getElementById(\"token\").value" in script and ".submit(" not in script and "requestSubmit" not in script


def test_plain_http_on_an_address_that_is_not_loopback_is_warned_about():
    from fabricjobs.web.server import clear_text_warning

    assert clear_text_warning("127.0.0.1", False) is None and clear_text_warning("::1", False) is None
    assert clear_text_warning("localhost", False) is None and clear_text_warning("0.0.0.0", True) is None
    warning = clear_text_warning("0.0.0.0", False)
    assert warning is not None and "plain HTTP on 0.0.0.0" in warning and "--tls-cert" in warning
