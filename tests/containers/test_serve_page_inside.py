"""vram serve's page inside a container, in a real headless Chromium: the rows NVML lists under
host pids that no process here could be told to be show `-` as their pid (as vram ps does), are
counted one process each, and stay one row each as the page applies the readings' deltas (keyed
by pid alone, every reading added one row more). Skipped, saying why, without chromium,
chromedriver or selenium. The fixtures: conftest.py here."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import chromium_env, chromium_sandbox_args

CHROMEDRIVER, CHROMIUM = "/usr/bin/chromedriver", shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None or not os.access(CHROMEDRIVER, os.X_OK),
                                reason="needs chromium and /usr/bin/chromedriver (as test_serve_web)")
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")
support = pytest.importorskip("selenium.webdriver.support.ui")

AGES = 4  # the matched row's age runs on as readings come (5 a second): this many seen, each checked
READ = """
const cards = Array.from(document.querySelectorAll('#gpus article.gpu'));
const cells = (css) => cards.map((card) => Array.from(card.querySelectorAll(css)).map((td) => td.textContent));
return {pids: cells('tr.proc td.pid'), ages: cells('tr.proc td.age').flat().join(' '),
        line: document.body.innerText.split('\\n').find((line) => line.includes(' used by ')) || ''};
"""


@pytest.mark.slow
def test_rows_without_a_pid_here_on_the_page(container, scenario, dev, env, children, tmp_path_factory):
    mine, mine_host = container.start(dev / "nvidia0")  # the only holder of GPU 0: matched, its age runs on
    first, first_host = container.start(dev / "nvidia1")  # two holders of GPU 1 here, and NVML lists a
    second, second_host = container.start(dev / "nvidia1")  # third pid outside: none can be told apart
    path = scenario({(mine_host, mine): {"0": "1GiB"}, (first_host, first): {"1": "2GiB"},
                     (second_host, second): {"1": "4GiB"}})
    base = container.serve("--simulate", str(path), env=env, children=children)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu", *chromium_sandbox_args()):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER, env=chromium_env(tmp_path_factory)),
                              options=options)
    try:
        driver.get(base + "/")
        ages: set[str] = set()
        while len(ages) < AGES:
            seen = support.WebDriverWait(driver, 30, poll_frequency=0.05).until(
                lambda d: (page := d.execute_script(READ))["ages"] not in ages and page, message="the rows' ages")
            ages.add(seen["ages"])
            assert seen["pids"] == [[str(mine)], ["-", "-", "-"]], seen
            assert "used by 4 processes" in seen["line"], seen
    finally:
        driver.quit()
