"""A real headless Chromium for the console tests: Debian's ``chromium`` and ``chromium-driver``
driven by Selenium, which is told where both are so that it downloads nothing (SE_OFFLINE, and
no Selenium Manager lookup). Missing either, the tests are skipped and say how to get them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from harness import wait_for

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
T = TypeVar("T")


def missing() -> str:
    """Why the browser tests cannot run here ("" when they can)."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if absent:
        return (f"{' and '.join(absent)} missing: apt-get install --no-install-recommends chromium chromium-driver "
                "(./scripts/test does it when run as root)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return ""


def start_chromium(width: int = 1280, height: int = 800):
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch a browser or a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--disable-extensions", "--no-first-run", f"--window-size={width},{height}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_window_size(width, height)
    return driver


def browser_fixture():
    """A module's one browser (starting Chromium takes seconds on two cores)."""

    @pytest.fixture(scope="module")
    def browser():
        why = missing()
        if why:
            pytest.skip(why)
        driver = start_chromium()
        try:
            yield driver
        finally:
            driver.quit()

    return browser


def until(predicate: Callable[[], T], what: str, timeout: float = 20.0) -> T:
    """wait_for, counting an element replaced under the test (the page redraws) as not yet."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    return wait_for(predicate, timeout, what, interval=0.05,
                    not_yet=(StaleElementReferenceException, NoSuchElementException))


def logged_out(driver) -> None:
    """Leave the page and drop every cookie. Leave first: a console page polls every 0.3 s, and
    once its cookie is gone its next poll (401) sends it to /login, a navigation that could
    overtake the test's own next one (seen once: /login#token=... replaced by /login, so the
    token in the fragment was never read)."""
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})


def log_in(driver, url: str, token: str) -> None:
    logged_out(driver)
    driver.get(url + "/login")
    driver.find_element("id", "token").send_keys(token)
    driver.find_element("id", "login").click()
    until(lambda: driver.find_elements("css selector", "#nav a.active"), "the console after logging in")


def texts(driver, selector: str) -> list[str]:
    """The text of every element ``selector`` finds, read in one script run. Read element by
    element (a WebDriver round trip each), a table that redraws every 0.3 s had replaced a row
    before the last was read, again on every try: a fresh clone beside the suite's other
    workers waited 20 s on stale elements for a row that was there all along."""
    return driver.execute_script("return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText);",
                                 selector)


def fetch_status(driver, path: str, csrf: str | None) -> int:
    """A POST made by the page's own script, with the session cookie (and the CSRF header if
    given): what a forged request from a logged-in browser would get."""
    headers = {"X-CSRF-Token": csrf} if csrf is not None else {}
    return driver.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', credentials: 'same-origin', headers: arguments[1]})"
        ".then(function (r) { done(r.status); }, function () { done(-1); });", path, headers)


def fits_the_width(driver) -> bool:
    """No horizontal scrolling of the page itself (a wide table scrolls inside its box)."""
    return driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
