"""The built site as a real browser lays it out: a headless Chromium (Qt WebEngine, the ``browser``
extra; `browser_page.py` drives it) opens the pages, and no table needs sideways scrolling in the
content column at common window widths, nor does a code block on the claim guide. Screenshots of every
page opened are left in ``build/screenshots/`` for a reader to look at."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import run_as_group

pytest.importorskip("PyQt6.QtWebEngineWidgets", reason="the browser extra (PyQt6-WebEngine) is not installed")

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "screenshots"
WIDTHS = (1024, 1280, 1440)  # window widths (px): a laptop, a common desktop, a wide one


def open_pages(jobs: list[tuple[Path, int]]) -> list[dict]:
    """What `browser_page.py` measured on each (page, window width), in one browser process."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "QTWEBENGINE_CHROMIUM_FLAGS": "--no-sandbox --disable-gpu --disable-dev-shm-usage"}
    done = run_as_group([sys.executable, str(Path(__file__).with_name("browser_page.py")), str(SHOTS),
                         *(f"{page}@{width}" for page, width in jobs)], env=env, timeout=300)
    measured = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(measured) == len(jobs), done.stdout + done.stderr[-2000:]
    assert all("Chrome/" in m["agent"] for m in measured), measured[0]["agent"]
    return measured


@pytest.fixture(scope="module")
def measured(site) -> dict[tuple[str, int], dict]:
    """Every page at 1280 px, the claim guide at each of `WIDTHS` too: ``{(page stem, width): ...}``."""
    pages = sorted((site / "guides").glob("*.html")) + [site / "index.html", site / "getting-started.html"]
    jobs = [(p, 1280) for p in pages] + [(site / "guides" / "claim.html", w) for w in WIDTHS if w != 1280]
    return {(Path(m["page"]).stem, m["width"]): m for m in open_pages(jobs)}


def too_wide(measured: dict, kinds: tuple[str, ...]) -> list[str]:
    return [f"{measured['page']} at {measured['width']} px: a {b['kind']} needs {b['needs']} px of "
            f"{b['has']} ({b['text'][:40]!r})" for b in measured["boxes"]
            if b["kind"] in kinds and b["needs"] > b["has"] + 1]


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_claim_guide_fits_its_column_in_a_browser(measured, width):
    """The claim guide's tables (made from claim.json) and its code blocks fit the content column."""
    page = measured[("claim", width)]
    tables = sum(b["kind"] == "table" for b in page["boxes"])
    assert tables >= 2, page["boxes"]
    assert not too_wide(page, ("table", "table frame", "code"))
    assert all((SHOTS / f"claim-{width}-table-{n}.png").stat().st_size > 10_000 for n in range(1, tables + 1))


@pytest.mark.slow
def test_no_table_of_the_site_scrolls_sideways_in_a_browser(measured):
    wide = [line for m in measured.values() for line in too_wide(m, ("table", "table frame"))]
    assert len(measured) >= 12 and not wide, "\n".join(wide)
