"""The dashboard served by `rtrl dashboard` on localhost, opened in headless Chromium (Debian's chromium and
chromedriver, driven by Selenium; never a downloaded browser): the experiment table and a chart render from
demo-like data (several cycles, two arms, MLflow lineage), and screenshots are written.

Screenshots go to $RTRL_SCREENSHOT_DIR when set, else to the test's tmp dir (the path is printed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from tests.conftest import free_port, make_config
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ROOT = Path(__file__).resolve().parents[2]


def _need_browser():
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian chromium + chromium-driver are not installed (infra/setup.sh installs them as root)")
    pytest.importorskip("selenium")


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"rtrl dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    wait_for(answers, timeout, f"{url} answering 200")


def _stop(proc: subprocess.Popen) -> None:
    """`rtrl dashboard` execs the Streamlit server; signal its whole session so nothing outlives the test."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    _need_browser()
    from infra.dashboard.demo_state import write_demo_state

    state = tmp_path_factory.mktemp("dash-state")
    port = free_port()
    overrides = [f'state_dir="{state}"', f"dashboard.port={port}", f"mlflow.ui_port={free_port()}"]
    cfg = make_config(state, f"dashboard.port={port}")
    write_demo_state(state, cycles=6, rows_per_cycle=6000, users=400, registry_cfg=cfg, hacking=True)
    log = open(state / "dashboard.log", "w")
    proc = subprocess.Popen(rtrl_argv("dashboard", overrides=overrides), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", proc)
        yield f"http://127.0.0.1:{port}", state
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1500,2400"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver, name: str, tmp_path: Path) -> Path:
    out = Path(os.environ.get("RTRL_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    assert driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def _wait(driver, css: str, timeout: float = 60, text: str | None = None):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout)
    if text is not None:
        wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
    return wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, css)))


def _wait_count(driver, css: str, n: int, timeout: float = 60) -> list:
    """The elements matching `css` once there are at least `n` of them (or those there are at the timeout)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, css)) >= n)
    except TimeoutException:
        pass
    return driver.find_elements(By.CSS_SELECTOR, css)


def test_experiment_table_and_chart_render(dashboard, browser, tmp_path):
    from selenium.webdriver.common.by import By

    url, _ = dashboard
    browser.get(f"{url}/?page=experiment")
    table = _wait(browser, '[data-testid="stTable"] table', text="Edit persistence")
    headers = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    for col in ("metric", "control", "treatment", "change", "95% interval"):
        assert col in headers, headers
    body = table.text
    for label in ("Dissatisfied follow-ups", "Latency p50", "Latency p95", "Broken tool calls", "Edit rate",
                  "Clarification rate", "Tokens per response"):
        assert label in body
    # the forest chart: Vega renders a canvas (or svg) with a non-zero size
    _wait(browser, '[data-testid="stVegaLiteChart"]')
    mark = _wait(browser, '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg')
    assert mark.size["width"] > 100 and mark.size["height"] > 50
    shot = _shot(browser, "dashboard-experiment.png", tmp_path)
    assert shot.stat().st_size > 20_000


def test_monitors_turn_red_and_lineage_renders(dashboard, browser, tmp_path):
    url, _ = dashboard
    browser.get(f"{url}/?page=monitors")
    alert = _wait(browser, '[data-testid="stAlertContentError"]', text="Clarification rate")
    assert "rose" in alert.text
    _wait(browser, '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg')
    _shot(browser, "dashboard-monitors.png", tmp_path)
    browser.get(f"{url}/?page=lineage")
    _wait(browser, '[data-testid="stGraphVizChart"] svg', timeout=90)
    _wait(browser, '[data-testid="stTable"] table', text="keep_champion")
    _shot(browser, "dashboard-lineage.png", tmp_path)


def test_empty_state_says_run_demo(browser, tmp_path_factory):
    state = tmp_path_factory.mktemp("empty-state")
    port = free_port()
    proc = subprocess.Popen(rtrl_argv("dashboard", overrides=[f'state_dir="{state}"', f"dashboard.port={port}"]),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", proc)
        browser.get(f"http://127.0.0.1:{port}/")
        info = _wait(browser, '[data-testid="stAlertContentInfo"]', text="rtrl demo")
        assert "No data yet" in info.text
    finally:
        _stop(proc)


def test_trends_and_health_render(dashboard, browser, tmp_path):
    from selenium.webdriver.common.by import By

    url, _ = dashboard
    browser.get(f"{url}/?page=trends")
    _wait(browser, '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg')
    # Streamlit renders the page's charts one by one: wait for all of them, then count (two per default metric:
    # edit persistence, dissatisfied follow-ups, latency p50)
    charts = _wait_count(browser, '[data-testid="stVegaLiteChart"]', 6)
    assert len(charts) == 6, f"{len(charts)} trend charts rendered"
    _shot(browser, "dashboard-trends.png", tmp_path)
    browser.get(f"{url}/?page=health")
    lag = _wait(browser, '[data-testid="stMetric"]', text="Reward-job lag")
    assert "548" in lag.text                                  # 137 records behind on each of 4 partitions
    _wait(browser, '[data-testid="stAlertContentError"]', text="FAILED")
    _shot(browser, "dashboard-health.png", tmp_path)
