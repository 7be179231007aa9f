"""Take the README's screenshots of the Evaluate page (and the Sweeps page when the home has a sweep) from the real
studio, in headless Debian chromium via Playwright, on an existing studio home that already holds an evaluation
(e.g. one made with `cookbook eval models=base,RUN_ID evals=builtin:facts-probes,builtin:facts-nll`).

    COOKBOOK_HOME=... .venv/bin/python scripts/evaluate_screenshots.py EVAL_ID [--sweep SWEEP_ID] \
        [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from test_browser import CHROMIUM, CHROMIUM_ARGS, studio_process, wait_idle  # noqa: E402


def shoot(page, url: str, wait_text: str, path: Path) -> None:
    page.goto(url)
    page.get_by_text(wait_text).first.wait_for(timeout=120_000)
    wait_idle(page)
    page.wait_for_timeout(1500)  # the grid and chart finish drawing
    page.screenshot(path=str(path), full_page=True)
    print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("eval_id")
    parser.add_argument("--sweep", default="")
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    options = parser.parse_args()
    home = Path(os.environ["COOKBOOK_HOME"])
    out = Path(options.out)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch, studio_process(home, Path(scratch) / "studio.log") as (url, _):
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            shoot(page, f"{url}/evaluate?eval={options.eval_id}", "value [95% interval]", out / "evaluate.png")
            if options.sweep:
                shoot(page, f"{url}/sweeps?sweep={options.sweep}", "members finished", out / "sweeps.png")
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
