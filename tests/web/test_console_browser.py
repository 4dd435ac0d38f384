"""The web console in a real headless Chromium, against a real ``fabricjobs web`` process and a
real node on a real SQLite store: log in, see a job started from the shell appear, open it,
stop it with the button, see TERMINATED, see the nodes and a plot with real data; restart a
running job, kill a running job's task and resume a failed and a stopped job with their buttons;
as a viewer, find no action buttons and get 403 on a forged POST, with and without the CSRF token.

With FABRICJOBS_SCREENSHOTS=DIR the pages are also saved there (``scripts/screenshots`` keeps
the docs' in docs/).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import httpx
import pytest

from harness import read_records
from browser import browser_fixture, fetch_status, fits_the_width, log_in, logged_out, texts, until
from web_site import Site, running_site

browser = browser_fixture()
SHOTS = os.environ.get("FABRICJOBS_SCREENSHOTS", "")


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    with running_site(request, tmp_path_factory.mktemp("console"), {"web": {"CONSOLE_INTERVAL_SEC": 0.3}}) as site:
        yield site


def shell(site: Site, text: str) -> None:
    done = site.cluster.shell("-e", text)
    assert done.returncode == 0, done.stdout + done.stderr


def shoot(driver, name: str) -> None:
    """The whole page (up to 2,000 pixels down), as the docs show it."""
    if not SHOTS:
        return
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    width, height = driver.execute_script(
        "return [document.documentElement.clientWidth, document.documentElement.scrollHeight]")
    clip = {"x": 0, "y": 0, "width": width, "height": min(height, 2000), "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
    (Path(SHOTS) / name).write_bytes(base64.b64decode(shot["data"]))


def test_an_operator_sees_a_shell_job_opens_it_stops_it_and_sees_nodes_and_plots(site, browser, tmp_path):
    url = site.web.url
    log_in(browser, url, site.tokens["operator"])  # (1)
    assert "No live job on this cluster" in until(lambda: browser.find_element("id", "empty").text,
                                                  "the empty state of a new cluster")

    # Some company for the job: a recurring one (fire lag), one that fails, one blocked by it.
    shell(site, "startjob user_job name='Probe.noop' uid='tick' exec_interval='00:00:01';"
                "startjob user_job name='Probe.always_fails' uid='broken';"
                "startjob user_job name='Probe.noop' uid='after-broken' depends_on='USER_JOB.Probe.always_fails.broken';")
    args = json.dumps({"log": str(tmp_path / "runs.jsonl"), "seconds": 120})
    shell(site, f"startjob user_job name='Probe.record' uid='from-the-shell' args='{args}';")  # (2)
    row = "a.job-link[href='#/job/USER_JOB/Probe.record/from-the-shell']"
    until(lambda: browser.find_elements("css selector", row), "the shell's job in the table")
    until(lambda: "IN_PROCESS" in _row_text(browser, "from-the-shell"), "the job to run")
    assert fits_the_width(browser)
    shoot(browser, "console-jobs.png")
    browser.get(url + "/#/history")  # the failed job has ended: it is in the history
    until(lambda: "FAILED" in " ".join(t for t in texts(browser, "#history tr") if "broken" in t), "the failed job")
    browser.get(url + "/#/jobs")

    click(browser, row)  # (3)
    until(lambda: "Probe.record" in browser.find_element("id", "job-title").text, "the job's page")
    until(lambda: "from-the-shell" in browser.find_element("id", "arguments").text
          or "runs.jsonl" in browser.find_element("id", "arguments").text, "the job's arguments")
    kill = until(lambda: browser.find_elements("id", "action-kill"), "the Kill button (the job has a task)")
    assert kill and browser.find_elements("id", "action-restart")
    click(browser, "#action-stop")  # (4): confirmed in a dialog first
    until(lambda: browser.find_element("id", "confirm").is_displayed(), "the confirmation")
    assert "Stop this job" in browser.find_element("id", "confirm-text").text
    browser.find_element("id", "confirm-ok").click()
    until(lambda: "TERMINATED" in browser.find_element("id", "job-title").text, "TERMINATED on the job's page")  # (5)
    until(lambda: "STOPPED" in browser.find_element("id", "runs").text, "the stopped run in the history")
    until(lambda: browser.find_elements("id", "action-resume"), "Resume, now that it is archived")
    assert not browser.find_elements("id", "action-stop") and "STOPJOB by token 'operator-1'" in browser.page_source
    assert site.cluster.fetch("jobstatus user_job 'Probe.record' with uid='from-the-shell';").rows[0][3] == "TERMINATED"

    browser.get(url + "/#/nodes")  # (6)
    # The page redraws every 0.3 s: a card's text is read in the same step that finds it.
    card = until(lambda: browser.find_element("css selector", ".node[data-node='w1']").text, "node w1's card")
    # (alive; suspect a while when a beat is late, as under a loaded test run)
    assert ("alive" in card or "suspect" in card) and "ANY:" in card and "Last beat" in card
    until(lambda: "Probe.noop" in browser.find_element("css selector", ".node[data-node='w1']").text
          or "No task running" in browser.find_element("css selector", ".node[data-node='w1']").text, "the tasks")
    shoot(browser, "console-nodes.png")
    browser.get(url + "/#/plots")
    until(lambda: [p for p in browser.find_elements("css selector", ".plot[data-kind='bars']")
                   if int(p.get_attribute("data-marks") or 0) > 0 and p.find_elements("css selector", "svg rect.mark")],
          "runs per minute drawn from real runs")
    until(lambda: int(browser.find_elements("css selector", ".plot[data-kind='lines']")[1].get_attribute("data-marks")) > 0,
          "the recurring job's fire lag")
    shoot(browser, "console-plots.png")
    browser.get(url + "/#/job/USER_JOB/Probe.noop/tick")  # a recurring job's page: durations, fire lag
    until(lambda: len(browser.find_elements("css selector", "#job-plots .plot svg")) == 3, "its three plots")
    shoot(browser, "console-job.png")


def test_an_operator_restarts_kills_and_resumes_jobs_with_the_buttons(site, browser, tmp_path):
    """Restart, Kill and Resume, each clicked and confirmed on the job's page, as Stop is above;
    what changes is read from the store (the job's row) and from the runs the jobs recorded."""
    log_in(browser, site.web.url, site.tokens["operator"])
    starts = tmp_path / "starts.jsonl"  # one line per run that began, with its epoch
    args = json.dumps({"log": str(tmp_path / "runs.jsonl"), "seconds": 120, "starts": str(starts)})
    site.cluster.fetch(f"startjob user_job name='Probe.record' uid='to-restart' args='{args}';"
                       f"startjob user_job name='Probe.record' uid='to-kill' args='{args}';"
                       "startjob user_job name='Probe.fail_once_no_retry' uid='to-resume' "
                       f"args='{json.dumps({'counter': str(tmp_path / 'counter')})}';")

    open_job(browser, site, "Probe.record", "to-restart")
    until(lambda: browser.find_elements("id", "action-kill"), "the running job's task")  # it runs
    first = until(lambda: epochs(starts, "to-restart"), "its run to begin")[0]
    confirm(browser, "restart", "Restart this job (RESTARTJOB)?")
    again = until(lambda: [e for e in epochs(starts, "to-restart") if e > first], "a new run after the restart")
    until(lambda: "RESTARTED" in browser.find_element("id", "runs").text, "the restarted run in the history")
    job = site.cluster.wait_job("USER_JOB", "Probe.record", "to-restart", lambda j: j.status.value == "IN_PROCESS")
    assert job.epoch >= again[0] > first and job.runs == 1 and job.failures == 0 and job.tries == 0
    assert "RESTARTJOB by token 'operator-1'" in browser.find_element("id", "banner").text

    open_job(browser, site, "Probe.record", "to-kill")
    until(lambda: browser.find_elements("id", "action-kill"), "the Kill button (the job has a task)")
    confirm(browser, "kill", "Kill task ")
    killed = site.cluster.wait_job("USER_JOB", "Probe.record", "to-kill", lambda j: j.kills == 1, 20, "the KILL")
    assert killed.failures == 1 and "killed by KILL from token 'operator-1'" in killed.error_msg
    until(lambda: "KILLED" in browser.find_element("id", "runs").text, "the killed run in the history")
    assert "KILL sent to node w1" in browser.find_element("id", "banner").text
    assert not any(r.get("end") for r in read_records(tmp_path / "runs.jsonl") if "to-kill" in r["key"])  # cut short

    site.cluster.wait_job("USER_JOB", "Probe.fail_once_no_retry", "to-resume", lambda j: j.archived, 20)
    open_job(browser, site, "Probe.fail_once_no_retry", "to-resume")
    until(lambda: "FAILED" in browser.find_element("id", "job-title").text, "the failed job's page")
    assert not browser.find_elements("id", "action-stop")  # archived: Resume only
    confirm(browser, "resume", "Resume this job (RESUMEJOB)?")
    until(lambda: "PROCESSED" in browser.find_element("id", "job-title").text, "PROCESSED after the resume")
    row = site.cluster.fetch("jobstatus user_job 'Probe.fail_once_no_retry' with uid='to-resume' details;")
    status = dict(zip(row.columns, row.rows[0]))
    assert status["Status"] == "PROCESSED" and status["Output"] == "2", status  # its second run ran

    site.cluster.fetch("stopjob user_job name='Probe.record' uid='to-restart' wait;")  # TERMINATED
    open_job(browser, site, "Probe.record", "to-restart")
    until(lambda: "TERMINATED" in browser.find_element("id", "job-title").text, "the stopped job's page")
    before = max(epochs(starts, "to-restart"))
    confirm(browser, "resume", "Resume this job (RESUMEJOB)?")
    until(lambda: [e for e in epochs(starts, "to-restart") if e > before], "a run of the resumed job")
    assert site.cluster.fetch("jobstatus user_job 'Probe.record' with uid='to-restart';").rows[0][3] == "IN_PROCESS"

    log_in(browser, site.web.url, site.tokens["viewer"])  # a viewer sees the running job, and no buttons
    open_job(browser, site, "Probe.record", "to-restart")
    until(lambda: "IN_PROCESS" in browser.find_element("id", "job-title").text, "the running job's page")
    assert not browser.find_elements("css selector", "#actions, button.act")
    site.cluster.fetch("stopjob user_job name='Probe.record';")  # both, to free the node


def open_job(driver, site: Site, name: str, uid: str) -> None:
    driver.get(f"{site.web.url}/#/job/USER_JOB/{name}/{uid}")
    until(lambda: uid in driver.find_element("id", "job-title").text, f"the page of {name} {uid}")


def confirm(driver, action: str, question: str) -> None:
    """Click an action's button and OK its confirmation, as a user does."""
    click(driver, f"#action-{action}")
    until(lambda: driver.find_element("id", "confirm").is_displayed(), f"the {action} confirmation")
    assert question in driver.find_element("id", "confirm-text").text
    driver.find_element("id", "confirm-ok").click()
    until(lambda: not driver.find_element("id", "confirm").is_displayed(), "the confirmation to close")
    until(lambda: driver.find_element("id", "banner").text, f"the answer to {action}")


def epochs(path: Path, uid: str) -> list[int]:
    return [r["epoch"] for r in read_records(path) if r["key"].endswith("." + uid)]


def test_a_viewer_sees_no_buttons_and_a_forged_post_is_refused(site, browser):
    shell(site, "startjob user_job name='Probe.noop' uid='for-the-viewer';")
    site.cluster.wait_job("USER_JOB", "Probe.noop", "for-the-viewer", lambda j: j.archived)
    logged_out(browser)  # log in by the link ./scripts/run prints: the token in the fragment fills the form in
    browser.get(site.web.url + "/login#token=" + site.tokens["viewer"])
    until(lambda: "press Log in" in browser.find_element("id", "message").text, "the form filled in by the link")
    assert "token=" not in browser.current_url and not browser.find_elements("css selector", "#nav a.active")
    browser.find_element("id", "login").click()  # never by itself: a link from any site would log us in (login CSRF)
    until(lambda: browser.find_elements("css selector", "#nav a.active"), "the console after the login")
    browser.get(site.web.url + "/#/job/USER_JOB/Probe.noop/for-the-viewer")
    until(lambda: "PROCESSED" in browser.find_element("id", "job-title").text, "the job's page")
    assert not browser.find_elements("css selector", "#actions, button.act") and "viewer" in browser.find_element("id", "who").text
    csrf = browser.find_element("css selector", "meta[name='fj-csrf']").get_attribute("content")
    resume = "/api/v1/jobs/USER_JOB/Probe.noop/for-the-viewer/resume"
    assert fetch_status(browser, resume, None) == 403  # no CSRF token: refused before the role is asked
    assert fetch_status(browser, resume, csrf) == 403  # the right CSRF token, but a viewer may not
    assert site.cluster.fetch("jobstatus user_job 'Probe.noop' with uid='for-the-viewer';").rows[0][3] == "PROCESSED"


def test_a_running_job_s_progress_shows_as_a_bar_in_the_table_and_on_its_page(site, browser):
    """current_job().progress(3, 4): a bar three quarters full, with "75%" beside it, in the
    job's row and on its page (JOBSTATUS's Progress); typing in the text filter narrows the
    table to the matching rows. The bar goes with the run."""
    site.cluster.fetch("startjob user_job name='Probe.progressing' uid='three-quarters' args='{\"done\": 3, \"total\": 4}';"
                       "startjob user_job name='Probe.noop' uid='a-whole-one' affinity='no-such-node';")  # stays live
    log_in(browser, site.web.url, site.tokens["viewer"])
    browser.get(site.web.url + "/#/jobs")
    row = until(lambda: _progress_of(browser, "#jobs tr", "three-quarters"), "the progress bar in the job's row")
    assert row == ("75", "75%", 0.75), row
    until(lambda: "a-whole-one" in " ".join(texts(browser, "#jobs tr")), "the other job in the table")

    browser.find_element("id", "filter-q").send_keys("THREE-Q")  # the text filter: any case, part of a UID
    until(lambda: [t for t in texts(browser, "#jobs tbody tr")] and
          all("three-quarters" in t for t in texts(browser, "#jobs tbody tr")),
          "the table narrowed to the job the text names")
    assert len(browser.find_elements("css selector", "#jobs tbody tr")) == 1

    open_job(browser, site, "Probe.progressing", "three-quarters")
    page = until(lambda: _progress_of(browser, ".kv", "three-quarters", by_text=False), "the bar on the job's page")
    assert page == ("75", "75%", 0.75), page
    site.cluster.fetch("stopjob user_job name='Probe.progressing' uid='three-quarters' wait timeout 10;"
                       "stopjob user_job name='Probe.noop' uid='a-whole-one';")
    until(lambda: "TERMINATED" in browser.find_element("id", "job-title").text, "the stopped job's page")
    assert not browser.find_elements("css selector", "[role='progressbar']")


def test_the_jobs_data_filters_by_node_and_text(site):
    """``/console/data/jobs?node=...&q=...`` as the table asks it, on the real web process: a
    job running on w1 and one no node may take (its AFFINITY names none), both named by the
    same text."""
    site.cluster.fetch("startjob user_job name='Probe.progressing' uid='filtered-running' args='{\"done\": 1}';"
                       "startjob user_job name='Probe.noop' uid='filtered-waiting' affinity='no-such-node';")
    data = httpx.Client(base_url=site.web.url, headers={"Authorization": f"Bearer {site.tokens['viewer']}"})

    def uids(**query: str) -> list[str]:
        body = data.get("/console/data/jobs", params=query).json()
        assert body["next_cursor"] is None and not body["partial"], body  # one page holds them
        return sorted(j["uid"] for j in body["jobs"])

    until(lambda: uids(q="filtered-") == ["filtered-running", "filtered-waiting"], "both jobs in the table")
    until(lambda: uids(q="filtered-", node="w1") == ["filtered-running"], "the running job on w1")
    assert uids(q="FILTERED-") == ["filtered-running", "filtered-waiting"]  # any case, in the UID
    assert uids(node="w1", name="Probe.noop", q="filtered-") == []
    assert uids(q="filtered-w") == ["filtered-waiting"]
    assert uids(q="no-such-node") == ["filtered-waiting"]  # ... or in the affinity
    assert uids(q="filtered-", node="w9") == [] and uids(q="nothing like it") == []
    assert all(j["node"] == "w1" for j in data.get("/console/data/jobs", params={"node": "w1"}).json()["jobs"])
    site.cluster.fetch("stopjob user_job name='Probe.progressing' uid='filtered-running' wait timeout 10;"
                       "stopjob user_job name='Probe.noop' uid='filtered-waiting';")


_PROGRESS = """
for (const box of document.querySelectorAll(arguments[0])) {
  if (arguments[2] && !box.innerText.includes(arguments[1])) continue;
  const bar = box.querySelector("[role='progressbar']");
  const pct = bar && bar.parentElement.querySelector(".pct");
  if (pct) return [bar.getAttribute("aria-valuenow"), pct.innerText,
                   bar.firstChild.getBoundingClientRect().width / bar.getBoundingClientRect().width];
}
return null;"""


def _progress_of(driver, selector: str, uid: str, by_text: bool = True) -> tuple[str, str, float] | None:
    """In the element ``selector`` finds (holding ``uid``, if ``by_text``): the bar's
    aria-valuenow, the percentage shown beside it and how full the bar is drawn. One script
    run (see browser.texts: the table redraws every 0.3 s)."""
    found = driver.execute_script(_PROGRESS, selector, uid, by_text)
    return None if found is None else (found[0], found[1], round(found[2], 2))


def test_a_phone_width_window_shows_the_jobs_as_cards(site, browser):
    # (this test may run alone; the table lists live jobs: one that waits for its date)
    shell(site, "startjob user_job name='Probe.noop' uid='on-a-phone' exec_interval='2099-01-01 00:00:00';")
    log_in(browser, site.web.url, site.tokens["viewer"])
    browser.set_window_size(390, 844)
    try:
        browser.get(site.web.url + "/#/jobs")
        until(lambda: browser.find_elements("css selector", "a.job-link"), "the jobs")
        assert fits_the_width(browser)
        cell = browser.find_element("css selector", "table.cards td[data-label='Status']")
        assert cell.value_of_css_property("display") == "flex"  # one card per job, each cell labelled
        shoot(browser, "console-phone.png")
    finally:
        browser.set_window_size(1280, 800)


def click(driver, selector: str) -> None:
    """Click what ``selector`` finds, again if the page redrew it under the click."""
    until(lambda: driver.find_element("css selector", selector).click() or True, f"a click on {selector}")


def _row_text(driver, uid: str) -> str:
    return " ".join(t for t in texts(driver, "#jobs tr") if uid in t)
