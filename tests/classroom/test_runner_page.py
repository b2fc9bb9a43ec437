"""The runner's status page (GET /) rendered in a real headless browser (Debian's chromium through
selenium): the queue's places and the running job without a name, the jobs finished in the last
hour and the median grade time, the leaderboard's display names (as text, never markup),
performance and correctness points, best kernel time per test, equal points ranked equal, only
timed runs on the board; readable at 1280 px and on a phone. Screenshots are kept as test
artifacts ($TEST_ARTIFACTS, else the test's tmp folder)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from classroom.runner.store import Quota, Store
from tests.helpers import scaled
from tests.runner_server import FAST, HANGS, RunnerServer

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).is_file()), None)
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").is_file()
                                                 else None)
selenium = pytest.importorskip("selenium", reason="selenium is in requirements-dev.txt: pip install -r it")
pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="needs Debian's chromium and chromium-driver "
                                       "(apt-get install chromium chromium-driver; .ci/run installs them)")

# A display name with markup in it: the page must show these characters, not run them.
MARKUP_NAME = "<b>bold</b> & <script>document.title='owned'</script>"


def _report(points: float, kernel_ms: float | None) -> str:
    """A GPU report of one DDS run: correct, timed, ``points`` of 3 performance points (no time: a
    CPU report, performance not run)."""
    perf = {"name": "dds/perf", "task": "dds", "kind": "performance", "score": points, "max_score": 3,
            "status": "passed" if points == 3 else "partial", "message": "ratio",
            "details": {"kernel_ms": kernel_ms, "baseline_ms": 0.02}}
    if kernel_ms is None:
        perf.update(status="not_run", message="needs a CUDA GPU", details={})
    tests = [{"name": "dds/c0", "task": "dds", "kind": "correctness", "score": 2, "max_score": 2,
              "status": "passed", "message": "ok", "details": {}}, perf]
    tasks = [{"task": "dds", "title": "dds", "score": 2, "max_score": 2, "summary": "ran", "status": "ok"}]
    return json.dumps({"score": 2 + points, "max_score": 5, "tests": tests, "tasks": tasks})


def _finish(srv: RunnerServer, student: str, name: str, report: str) -> None:
    """A finished, opted-in job of ``student`` put straight into the store (the server's one worker
    is busy: nothing else can lease it meanwhile)."""
    store = Store(srv.data)
    try:
        store.submit(student, FAST, Quota(0, 24), display_name=name)
        now = time.time()
        job = store.lease("test-owner", "test", 3600, now=now - 90)   # a 90 s grade, as on a GPU
        assert job is not None and job.student == student
        assert store.finish("test-owner", job.id, report, "# report", now=now, device="cpu", reached_kernels=True)
    finally:
        store.close()


def _artifacts(tmp_path) -> Path:
    folder = Path(os.environ.get("TEST_ARTIFACTS") or tmp_path) / "runner-page"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _fits(browser) -> bool:
    """Nothing on the page is wider than the window (a wide table scrolls in its own box)."""
    return browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")


def _lines(browser, element) -> int:
    """How many lines the element's text takes."""
    return browser.execute_script("const r = document.createRange(); r.selectNodeContents(arguments[0]);"
                                  "return new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size;",
                                  element)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    profile = tempfile.mkdtemp(prefix="runner-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(scaled(60))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.slow   # the runner's worker busy until its time limit (HANGS)
def test_the_status_page_shows_queue_and_leaderboard(tmp_path, browser):
    from selenium.webdriver.common.by import By
    srv = RunnerServer(tmp_path, ("stu_ann", "stu_ben", "stu_cat", "stu_dan", "stu_eve", "stu_fay", "stu_gus"),
                       task_timeout_s=scaled(60))
    try:
        tokens = srv.tokens()
        _, busy = srv.submit(tokens["stu_ann"], HANGS)                  # the one worker, busy
        srv.wait_job(tokens["stu_ann"], busy["job"], states=("running",))
        _finish(srv, "stu_ben", "ben's fast one", _report(2.5, 0.0321))
        _finish(srv, "stu_ben", "Ben B", _report(1.0, 0.0123))          # later: his name; best of both runs
        _finish(srv, "stu_cat", MARKUP_NAME, _report(3.0, 0.0456))
        _finish(srv, "stu_fay", "Fay with a name long enough to wrap", _report(3.0, 0.0789))   # ties cat
        _finish(srv, "stu_gus", "Gus stub", _report(0, None))          # no time: not on the board
        for student in ("stu_dan", "stu_eve"):
            assert srv.submit(tokens[student], FAST)[0] == 201          # waiting behind ann's job

        browser.get(srv.url + "/")
        assert browser.title == "Course GPU runner"
        summary = browser.find_element(By.ID, "summary")
        assert (summary.get_attribute("data-queued"), summary.get_attribute("data-running")) == ("2", "1")
        queue = browser.find_elements(By.CSS_SELECTOR, "#queue tr.queued")
        assert [r.get_attribute("data-position") for r in queue] == ["1", "2"]
        assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in queue] == ["1", "2"]
        etas = [float(r.get_attribute("data-eta-s")) for r in queue]
        assert 0 < etas[0] < etas[1]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#running tr.running")) == 1
        assert summary.get_attribute("data-finished") == "5" and summary.get_attribute("data-median-s") == "90"
        assert len(browser.find_elements(By.CSS_SELECTOR, "#finished tr.finished")) == 5
        assert "stu_" not in browser.page_source and busy["job"] not in browser.page_source   # no id, no job

        board = browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr.board-row")
        names = [r.find_element(By.CSS_SELECTOR, "td.name").text for r in board]
        assert names == [MARKUP_NAME, "Fay with a name long enough to wrap", "Ben B"]   # markup as text
        assert [r.get_attribute("data-rank") for r in board] == ["1", "1", "3"]        # equal points, equal rank
        assert browser.find_elements(By.CSS_SELECTOR, "#leaderboard b") == []
        cells = {r.find_element(By.CSS_SELECTOR, "td.name").text: r for r in board}
        ben = cells["Ben B"]
        assert ben.find_element(By.CSS_SELECTOR, 'td[data-task="dds"]').text == "2.5"    # best points
        assert ben.find_element(By.CSS_SELECTOR, "td.correctness").text == "2"
        assert ben.find_element(By.CSS_SELECTOR, 'td[data-test="dds/perf"]').text == "12.3 µs"  # best time
        assert cells[MARKUP_NAME].find_element(By.CSS_SELECTOR, 'td[data-test="dds/perf"]').text == "45.6 µs"
        assert browser.title == "Course GPU runner"                   # no script ran
        shots = _artifacts(tmp_path)
        for width, height, name in ((1280, 800, "desktop-1280"), (390, 844, "phone")):
            browser.set_window_size(width, height)
            browser.get(srv.url + "/")
            browser.save_screenshot(str(shots / f"status-{name}.png"))
            assert _fits(browser), name
            for cell in browser.find_elements(By.CSS_SELECTOR, "#leaderboard td.name"):
                assert _lines(browser, cell) == 1, (name, cell.text)     # names never wrap
        assert (shots / "status-desktop-1280.png").stat().st_size > 0
    finally:
        srv.stop()


def test_a_cpu_runner_says_why_there_is_no_board(tmp_path, browser):
    from selenium.webdriver.common.by import By
    srv = RunnerServer(tmp_path, ("stu_ann",))
    try:
        _finish(srv, "stu_ann", "Ann", _report(0, None))               # a CPU grade: correct, untimed
        browser.set_window_size(1280, 800)
        browser.get(srv.url + "/")
        browser.save_screenshot(str(_artifacts(tmp_path) / "status-cpu-1280.png"))
        assert browser.find_elements(By.CSS_SELECTOR, "#leaderboard") == []    # no board of zeros
        hint = browser.find_element(By.ID, "board-empty")
        assert "CPU" in hint.text and hint.is_displayed()
        top, bottom = browser.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                             "return [r.top, r.bottom];", hint)
        assert 0 <= top and bottom <= browser.execute_script("return window.innerHeight")   # on screen
        finished = browser.find_elements(By.CSS_SELECTOR, "#finished tr.finished")
        assert len(finished) == 1 and "Ann" not in browser.page_source
    finally:
        srv.stop()
