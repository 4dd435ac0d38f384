"""The console's live log panel (JOBLOG ... FOLLOW) in a real headless Chromium,
against a real ``fabricjobs web`` process and a real node: a running job's page shows its
first line while the run goes on, then the next one, and says when the run has ended."""

from __future__ import annotations

import re

import pytest

from browser import browser_fixture, log_in, until
from web_site import running_site

browser = browser_fixture()


def live_text(browser) -> str:
    found = browser.find_elements("id", "live-log")
    return found[0].text if found else ""


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    with running_site(request, tmp_path_factory.mktemp("follow-console"), {"web": {"CONSOLE_INTERVAL_SEC": 0.3}}) as site:
        yield site


def test_a_running_jobs_page_shows_its_log_lines_as_they_come(site, browser, tmp_path):
    gate = tmp_path / "gate"
    done = site.cluster.shell("-e", f"startjob user_job name='Probe.log_and_wait' uid='panel' args='{{\"gate\": \"{gate}\"}}';")
    assert done.returncode == 0, done.stderr
    site.cluster.wait_job("USER_JOB", "Probe.log_and_wait", "panel", lambda j: j.status.name == "IN_PROCESS")
    log_in(browser, site.web.url, site.tokens["viewer"])
    browser.get(site.web.url + "/#/job/USER_JOB/Probe.log_and_wait/panel")

    until(lambda: "first line, before the gate" in live_text(browser), "the first line in the live panel")
    assert site.cluster.job("USER_JOB", "Probe.log_and_wait", "panel").status.name == "IN_PROCESS"
    assert "second line" not in live_text(browser)
    gate.touch()
    until(lambda: "second line, after the gate" in live_text(browser), "the second line in the live panel")
    until(lambda: "OK -> PROCESSED" in live_text(browser), "how the run ended")
    until(lambda: browser.find_element("id", "live-state").text == "The run has ended.", "the panel's end note")


def test_the_live_log_follows_each_run_of_a_recurring_job_not_only_the_first(site, browser, tmp_path):
    """The panel stayed on "The run has ended." after the first run it followed: a recurring
    job's next fire (and a restart, a takeover) ran with no line shown."""
    args = f'{{"log": "{tmp_path / "runs"}", "seconds": 1.5, "talk": 0.2}}'
    done = site.cluster.shell("-e", f"startjob user_job name='Probe.record' uid='again' exec_interval='00:00:02' args='{args}';")
    assert done.returncode == 0, done.stderr
    log_in(browser, site.web.url, site.tokens["viewer"])
    browser.get(site.web.url + "/#/job/USER_JOB/Probe.record/again")

    def followed() -> int:
        """The number of the run the panel follows (0: none yet)."""
        found = re.search(r"run (\d+) of USER_JOB\.Probe\.record\.again", live_text(browser))
        return int(found.group(1)) if found else 0

    first = until(followed, "a run followed")  # (the first the page saw going on: on a slow machine, not run 1)
    until(lambda: followed() > first, "the next run followed", timeout=20)
    until(lambda: "still running" in live_text(browser), "a line of the next run")
    site.cluster.shell("-e", "stopjob user_job name='Probe.record' uid='again';")
