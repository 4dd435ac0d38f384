"""What an operator does at the prompt, done in the console, in a real headless Chromium against
a real ``fabricjobs web`` process and a real node: start a job with the form, then Run now,
Update, Hold, Release and Finish it with its page's buttons, each change read back from the
store; an admin creates and drops a calendar; the history finds an ended job, one that ended
two days ago too; the three ways the console used to stay on "Loading…" or link to the wrong
job (a task link of a UID with '.', a stray '%' in the address, a job there is not); and the
jobs table pages through 10,000 live jobs. One browser for the module (Chromium takes seconds
to start), the clicks grouped into few sessions."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from browser import browser_fixture, log_in, texts, until
from fabricjobs.model import Job, JobKey, Status
from harness import read_records
from web_site import Site, running_site

browser = browser_fixture()
NEVER = "0 0 1 1 *"  # recurring, its next fire months away: SCHEDULED between fires


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    with running_site(request, tmp_path_factory.mktemp("console-actions"), {"web": {"CONSOLE_INTERVAL_SEC": 0.3}}) as site:
        yield site


def click(driver, selector: str) -> None:
    until(lambda: driver.find_element("css selector", selector).click() or True, f"a click on {selector}")


def confirm(driver, action: str, question: str) -> None:
    """Click an action's button and OK its confirmation, as a user does; wait for the answer."""
    driver.execute_script("document.getElementById('banner').textContent = ''")
    click(driver, f"#action-{action}")
    until(lambda: driver.find_element("id", "confirm").is_displayed(), f"the {action} confirmation")
    assert question in driver.find_element("id", "confirm-text").text
    driver.find_element("id", "confirm-ok").click()
    until(lambda: driver.find_element("id", "banner").text, f"the answer to {action}")


def fill(driver, selector: str, text: str) -> None:
    """Type ``text`` into the field ``selector`` finds, once the page has drawn it."""
    def typed() -> bool:
        field = driver.find_element("css selector", selector)
        field.clear()
        field.send_keys(text)
        return True

    until(typed, f"the field {selector}")


def title(driver) -> str:
    found = driver.find_elements("id", "job-title")
    return found[0].text if found else ""


def test_an_operator_starts_a_job_and_runs_updates_holds_releases_and_finishes_it(site: Site, browser):
    url, key = site.web.url, ("USER_JOB", "Probe.echo", "from-the-form")  # (ARGS bind to echo(value))
    log_in(browser, url, site.tokens["operator"])
    browser.get(url + "/#/jobs")
    click(browser, "#start summary")
    click(browser, "#start-type option[value='USER_JOB']")
    fill(browser, "#start-name", "Probe.echo")
    fill(browser, "#start-uid", "from-the-form")
    fill(browser, "#start-exec_interval", NEVER)
    fill(browser, "#start-args", '{"value": 1}')
    click(browser, "#start-submit")
    until(lambda: "from-the-form" in title(browser) and "SCHEDULED" in title(browser), "the new job's page")  # start
    assert "STARTJOB Probe.echo: now SCHEDULED" in browser.find_element("id", "banner").text  # said on the page it leads to
    row = site.cluster.job(*key)
    assert row.status is Status.SCHEDULED and row.execution_interval == NEVER and row.owner == "operator-1"
    assert json.loads(row.arguments)["value"] == 1
    details = browser.find_element("id", "details").text
    assert "Owner\noperator-1" in details and "Requestor" in details and "Calendar" in details

    confirm(browser, "run", "Run this job once now, its schedule unchanged (RUNJOB)?")  # run now
    ran = site.cluster.wait_job(*key, lambda j: j.runs == 1 and j.status is Status.SCHEDULED, 20, "the run now")
    assert ran.next_run == row.next_run  # its schedule goes on as it was
    until(lambda: "OK" in browser.find_element("id", "runs").text, "the run in the page's history")

    click(browser, "#action-update")  # update: the schedule, the priority, the affinity
    fill(browser, "#update-exec_interval", "0 0 2 1 *")
    fill(browser, "#update-priority", "7")
    fill(browser, "#update-affinity", "w1")
    click(browser, "#update-submit")
    updated = site.cluster.wait_job(*key, lambda j: j.priority == 7, 10, "the update")
    assert (updated.execution_interval, updated.affinity) == ("0 0 2 1 *", "w1")
    until(lambda: "UPDATEJOB by token 'operator-1'" in browser.find_element("id", "details").text, "the page read again")

    confirm(browser, "hold", "Hold this job")  # hold
    site.cluster.wait_job(*key, lambda j: j.status is Status.HELD, 10, "the hold")
    until(lambda: "HELD" in title(browser), "HELD on the page")
    assert not browser.find_elements("id", "action-run") and not browser.find_elements("id", "action-hold")
    confirm(browser, "release", "Release this job and its held children (RELEASEJOB)?")  # release
    released = site.cluster.wait_job(*key, lambda j: j.status is Status.SCHEDULED, 10, "the release")
    assert "RELEASEJOB by token 'operator-1'" in released.error_msg
    until(lambda: "SCHEDULED" in title(browser), "SCHEDULED again on the page")

    confirm(browser, "finish", "then no more fires (FINISHJOB)?")  # finish: between fires, PROCESSED at once
    site.cluster.wait_job(*key, lambda j: j.status is Status.PROCESSED and j.archived, 10, "the finish")
    until(lambda: "PROCESSED" in title(browser), "PROCESSED on the page")
    assert browser.find_elements("id", "action-resume") and not browser.find_elements("id", "action-finish")


def test_a_page_put_off_while_its_update_form_has_the_focus_catches_up_after(site: Site, browser):
    """A job's page does not redraw under the typing hand, but the answers that came while the
    form had the focus counted as drawn: once it lost the focus the page stayed as it was
    (HELD, with a Release button) until the job changed again, for an ended job never."""
    url, key = site.web.url, ("USER_JOB", "Probe.noop", "stale")
    site.cluster.fetch("startjob user_job name='Probe.noop' uid='stale' hold=true;")
    log_in(browser, url, site.tokens["operator"])
    browser.get(url + "/#/job/USER_JOB/Probe.noop/stale")
    until(lambda: "HELD" in title(browser), "the held job's page")
    click(browser, "#action-update")
    click(browser, "#update-priority")  # the focus in the form
    site.cluster.fetch("releasejob user_job name='Probe.noop' uid='stale';")
    site.cluster.wait_job(*key, lambda j: j.archived, 20, "the released job to run and end")
    for _ in range(2):  # two refreshes (their time, to the second, in the status line) read the ended job
        shown = browser.find_element("id", "status").text
        until(lambda: browser.find_element("id", "status").text != shown, "a refresh of the page's data")
    assert "HELD" in title(browser)  # (not redrawn while the form has the focus)
    browser.execute_script("document.activeElement.blur()")
    until(lambda: "PROCESSED" in title(browser), "the page to catch up once the form lost the focus")
    assert not browser.find_elements("id", "action-release")


def test_an_admin_creates_and_drops_a_calendar(site: Site, browser):
    log_in(browser, site.web.url, site.tokens["admin"])
    browser.get(site.web.url + "/#/calendars")
    fill(browser, "#calendar-name", "holidays")
    fill(browser, "#calendar-rules", "2026-12-25\n* * * * sat,sun")
    click(browser, "#calendar-submit")
    until(lambda: [t for t in texts(browser, "#calendars tr") if "holidays" in t], "the new calendar in the list")
    stored = site.cluster.client().store.calendar("holidays")
    assert stored is not None and len(stored.rules) == 2
    click(browser, "button[data-calendar='holidays']")
    until(lambda: browser.find_element("id", "confirm").is_displayed(), "the drop confirmation")
    assert "DROPCALENDAR" in browser.find_element("id", "confirm-text").text
    browser.find_element("id", "confirm-ok").click()
    until(lambda: not [t for t in texts(browser, "#calendars tr") if "holidays" in t], "the calendar gone from the list")
    assert site.cluster.client().store.calendar("holidays") is None
    log_in(browser, site.web.url, site.tokens["operator"])  # an operator sees the list, not the form
    browser.get(site.web.url + "/#/calendars")
    until(lambda: "An admin creates and drops calendars" in browser.find_element("id", "main").text, "the operator's view")


def test_the_history_finds_ended_jobs_a_recent_one_and_one_two_days_old(site: Site, browser):
    store = site.cluster.client().store
    site.cluster.fetch("startjob user_job name='Probe.fails_no_retry' uid='hist-failed';")
    site.cluster.wait_job("USER_JOB", "Probe.fails_no_retry", "hist-failed", lambda j: j.archived, 20)
    old_end = datetime.now(timezone.utc) - timedelta(days=2)  # a job that ended two days ago, as the store keeps it
    row = store.insert(Job(key=JobKey("USER_JOB", "Report.nightly", "2-days-ago"), status=Status.WAITING,
                           creation_time=old_end - timedelta(minutes=5), owner="ann")).row
    store.cas(row, row.replace(status=Status.PROCESSED, archived=True, end_time=old_end, start_time=old_end - timedelta(minutes=1)))
    log_in(browser, site.web.url, site.tokens["viewer"])
    browser.get(site.web.url + "/#/history")

    def found() -> list[str]:
        return texts(browser, "#history tbody tr")

    until(lambda: any("hist-failed" in t and "FAILED" in t for t in found()), "the failed job, newest first")
    fill(browser, "#history-name", "nightly")
    fill(browser, "#history-owner", "ann")
    click(browser, "#history-search")
    until(lambda: len(found()) == 1 and "2-days-ago" in found()[0] and "PROCESSED" in found()[0], "the job of two days ago")
    click(browser, "#history tbody a.job-link")
    until(lambda: "2-days-ago" in title(browser) and "PROCESSED" in title(browser), "its page")
    browser.get(site.web.url + "/#/history")
    fill(browser, "#history-name", "")
    fill(browser, "#history-owner", "")
    click(browser, "#history-status option[value='FAILED']")
    click(browser, "#history-search")
    until(lambda: found() and all("FAILED" in t for t in found()) and any("hist-failed" in t for t in found()),
          "only the failed ones")


def test_the_console_no_longer_links_wrong_or_stays_on_loading(site: Site, browser, tmp_path):
    starts = tmp_path / "starts.jsonl"
    args = json.dumps({"log": str(tmp_path / "runs.jsonl"), "seconds": 60, "starts": str(starts)})
    site.cluster.fetch(f"startjob user_job name='Probe.record' uid='v1.2' args='{args}';"
                       "startjob user_job name='Probe.noop' uid='100%' affinity='no-such-node';")
    until(lambda: read_records(starts), "the run of UID v1.2")
    log_in(browser, site.web.url, site.tokens["viewer"])
    browser.get(site.web.url + "/#/nodes")  # a task link of a UID with a '.' in it
    click(browser, ".node[data-node='w1'] a.task-link[href$='/v1.2']")  # (another test's run may be listed too)
    until(lambda: title(browser) == "USER_JOB · Probe.record · v1.2 IN_PROCESS", "the page of the job the task runs")

    browser.get(site.web.url + "/#/job/USER_JOB/Probe.noop/100%")  # a '%' no console link has
    until(lambda: "100%" in title(browser), "the job whose UID the address holds as typed")
    browser.get(site.web.url + "/#/job/USER_JOB/Probe.noop/100%25")  # ... as the console writes it
    until(lambda: "100%" in title(browser), "the same job")

    browser.get(site.web.url + "/#/job/USER_JOB/Probe.noop/no-such-uid")  # a job there is not
    text = until(lambda: browser.find_element("id", "failed").text, "the page to say so")
    assert "Not found" in text and "No such job [type: USER_JOB, name: Probe.noop, uid: no-such-uid]" in text
    assert "Loading" not in browser.find_element("id", "main").text
    site.cluster.fetch("stopjob user_job name='Probe.record' uid='v1.2'; stopjob user_job name='Probe.noop' uid='100%';")


def test_refusals_keep_the_form_and_a_viewer_sees_no_stray_text(site: Site, browser):
    """A search the server refuses is said beside the form, which stays to be mended (it
    replaced the whole view, form and all, until the page was reloaded); an update that is
    refused keeps the form and what was typed; a viewer's pages hold no stray 'null'."""
    site.cluster.fetch(f"startjob user_job name='Probe.noop' uid='mend-me' exec_interval='{NEVER}';")
    log_in(browser, site.web.url, site.tokens["operator"])
    browser.get(site.web.url + "/#/history")
    until(lambda: browser.find_element("id", "history-form"), "the search form")
    browser.execute_script("document.getElementById('history-since').value = '2030-01-01T00:00:00';"
                           "document.getElementById('history-until').value = '2029-01-01T00:00:00';")  # ends before it starts
    click(browser, "#history-search")
    text = until(lambda: browser.find_element("id", "history-refused").text, "the refusal beside the form")
    assert "This search cannot be made" in text and browser.find_element("id", "history-form").is_displayed()
    browser.execute_script("document.getElementById('history-until').value = ''")
    click(browser, "#history-search")
    until(lambda: browser.find_elements("id", "history-pager"), "the search once mended")

    browser.get(site.web.url + "/#/job/USER_JOB/Probe.noop/mend-me")
    click(browser, "#action-update")
    fill(browser, "#update-exec_interval", "bogus")
    click(browser, "#update-submit")
    until(lambda: "UPDATEJOB" in browser.find_element("id", "banner").text and "refused" in
          browser.find_element("id", "banner").text, "the refusal")
    until(lambda: browser.find_element("id", "update-exec_interval").get_attribute("value") == "bogus",
          "the form still open with what was typed")

    log_in(browser, site.web.url, site.tokens["viewer"])
    for page in ("/#/jobs", "/#/job/USER_JOB/Probe.noop/mend-me"):
        browser.get(site.web.url + page)
        until(lambda: browser.find_elements("css selector", "#main h1"), f"the page {page}")
        stray = browser.execute_script("return Array.from(document.getElementById('main').childNodes)"
                                       ".filter(n => n.nodeType === 3).map(n => n.textContent)")
        assert "null" not in stray, (page, stray)
    site.cluster.fetch("stopjob user_job name='Probe.noop' uid='mend-me';")


def test_a_session_ended_under_the_page_says_so_and_comes_back_to_the_page(site: Site, browser):
    """The token of an open console is revoked: the next read sends the browser to the login,
    which says why; logged in again, the browser is back on the page it was on."""
    made = site.cluster.cli("token", "create", "short-lived", "--role", "viewer")
    assert made.returncode == 0, made.stderr
    site.cluster.fetch("startjob user_job name='Probe.noop' uid='come-back' hold=true;")
    log_in(browser, site.web.url, made.stdout.strip())
    browser.get(site.web.url + "/#/job/USER_JOB/Probe.noop/come-back")
    until(lambda: "come-back" in title(browser), "the job's page")
    assert site.cluster.cli("token", "revoke", "short-lived").returncode == 0
    text = until(lambda: browser.find_element("id", "message").text, "the login page saying why")
    assert "Your session ended" in text and "/login" in browser.current_url
    browser.find_element("id", "token").send_keys(site.tokens["viewer"])
    browser.find_element("id", "login").click()
    until(lambda: "come-back" in title(browser), "the page it was on, after the login")
    site.cluster.fetch("stopjob user_job name='Probe.noop' uid='come-back';")


def test_the_jobs_table_pages_through_10000_live_jobs(site: Site, browser):
    """10,000 live jobs (HELD: live, but no node reads them as work), written the fastest way
    the store allows: Next goes through all of them once, 1,000 a page; the count says 10,000.
    (How fast the first rows show is scripts/bench.py console's figure.)"""
    store = site.cluster.client().store
    held = len(store.by_status([Status.HELD])) + 10_000  # (another test may have left a job HELD)
    now = datetime.now(timezone.utc)
    jobs = [Job(key=JobKey("USER_JOB", "Bulk.held", f"b{i:05d}"), status=Status.HELD, creation_time=now) for i in range(10_000)]
    with store.transaction():
        assert all(r.applied for r in store.insert_many(jobs))
    log_in(browser, site.web.url, site.tokens["viewer"])
    browser.get(site.web.url + "/#/jobs")
    until(lambda: f"HELD {held:,}" in " ".join(texts(browser, ".chip")), "the count of the held jobs")
    click(browser, "#page-size option[value='1000']")
    fill(browser, "#filter-name", "bulk.held")
    seen: list[str] = []
    for page in range(10):
        rows = until(lambda: (lambda r: r if len(r) == 1000 and r[0] not in seen else None)(
            browser.execute_script("return Array.from(document.querySelectorAll('#jobs tbody tr'), r => r.dataset.key)")),
            f"page {page + 1}")
        seen += rows
        if page < 9:
            click(browser, "#page-next")
    assert len(seen) == len(set(seen)) == 10_000 and seen == sorted(seen)
    assert seen[0] == "USER_JOB.Bulk.held.b00000" and seen[-1] == "USER_JOB.Bulk.held.b09999"
    until(lambda: browser.find_element("id", "page-next").get_attribute("disabled") is not None, "no page after the last")
