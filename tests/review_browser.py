"""The review app in a real browser: `passk review` as a process, and Debian's chromium
driven headless by Selenium through Debian's chromedriver."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.support import free_ports, running

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)
TOKENS = "ann:ann-token-7f3a,bob:bob-token-91c2"


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def review_app(env: dict[str, str], log: Path, **extra: str) -> Iterator[str]:
    """`passk review` on a free loopback port for the duration of a block: its base URL."""
    port = free_ports(1)
    env = {**env, "PASSK_REVIEW_TOKENS": TOKENS, **extra}
    base = f"http://127.0.0.1:{port}"
    with running(["review", "--port", str(port)], env, log, ready=lambda: answers(f"{base}/login")):
        yield base


@contextmanager
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or "chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--window-size=1280,1100",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER or "chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def by_testid(driver: Any, testid: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]')


def all_by_testid(driver: Any, testid: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]'))


def submit(driver: Any, testid: str, timeout: float = 60) -> None:
    """Click a form's submit button and wait until the next page has replaced this one.

    The old document is marked with a window property that a new document does not
    have. Selenium's staleness_of asks about the old <html> node instead, and Chromium
    answers that with "Node with given id does not belong to the document" (an unknown
    error, not StaleElementReference) when the navigation lands mid-question.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    driver.execute_script("window.__passkOldPage = true;")
    by_testid(driver, testid).click()
    # a script run while the page is being swapped may fail: ask again until the deadline
    WebDriverWait(driver, timeout, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && !window.__passkOldPage;"
        )
    )


def sign_in(driver: Any, base: str, name: str, token: str) -> None:
    driver.get(f"{base}/login")
    by_testid(driver, "login-name").send_keys(name)
    by_testid(driver, "login-token").send_keys(token)
    submit(driver, "login-submit")


def current_trial(driver: Any) -> str:
    """The trial id of the item page the browser shows."""
    path = urlsplit(driver.current_url).path
    assert path.startswith("/item/"), driver.current_url
    return unquote(path[len("/item/") :])


def session_cookie(driver: Any) -> str:
    cookie = driver.get_cookie("passk_review")
    assert cookie, "no session cookie"
    return str(cookie["value"])
