"""Opens pages of the built site in a headless Chromium (Qt WebEngine, the ``browser`` extra), each at a
window width, once their scripts have run; prints what it measured, one JSON line per page, and saves
screenshots. Run as a script (a Qt application wants a process of its own)::

    QT_QPA_PLATFORM=offscreen python tests/docs/browser_page.py SHOTS_DIR PAGE.html@WIDTH [...]

Measured per page: the browser's user agent, the content column's width (``article``), and for every
table (the theme wraps each in a scrolling frame) and code block in it the width it needs
(``scrollWidth``) and the width it has (``clientWidth``), with its first words, so that a test can say
which one scrolls sideways. Screenshots, of the window: ``SHOTS_DIR/STEM-WIDTH.png`` (the top of the
page) and ``STEM-WIDTH-table-N.png`` (scrolled to its N-th table, from 1)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PyQt6.QtCore import QSize, QTimer, QUrl
from PyQt6.QtWebEngineWidgets import QWebEngineView
from PyQt6.QtWidgets import QApplication

SETTLE_MS = 1500  # after loading: the theme's scripts wrap tables in their scrolling frames
PAINT_MS = 400  # after scrolling, before a screenshot
TIMEOUT_MS = 60000  # per page
HEIGHT = 900  # window height (px)

MEASURE = """
(() => {
  const article = document.querySelector("article") || document.body;
  const boxes = [...article.querySelectorAll(".md-typeset__scrollwrap, table, pre > code")];
  return JSON.stringify({
    agent: navigator.userAgent,
    column: article.clientWidth,
    boxes: boxes.map(e => ({kind: e.tagName.toLowerCase() === "code" ? "code" :
                                  e.tagName.toLowerCase() === "table" ? "table" : "table frame",
                            needs: e.scrollWidth, has: e.clientWidth, text: e.innerText.slice(0, 60)})),
  });
})()
"""
SCROLL_TO_TABLE = "document.querySelectorAll('article table')[{}].scrollIntoView({{block: 'center'}})"


def main(shots: Path, jobs: list[tuple[str, int]]) -> int:
    app = QApplication(sys.argv[:1])
    view = QWebEngineView()
    todo, failed = list(jobs), []
    timer = QTimer()
    timer.setSingleShot(True)

    def start() -> None:
        if not todo:
            app.quit()
            return
        page, width = todo[0]
        view.resize(QSize(width, HEIGHT))
        timer.start(TIMEOUT_MS)
        view.load(QUrl.fromLocalFile(str(Path(page).resolve())))

    def report(result: dict) -> None:
        timer.stop()
        page, width = todo.pop(0)
        print(json.dumps({"page": page, "width": width, **result}), flush=True)
        failed.extend([page] if "error" in result else [])
        start()

    def shoot(result: dict, tables: int, n: int = 0) -> None:
        """Screenshot ``n`` (0: the top of the page, k: scrolled to table k), then the next."""
        page, width = todo[0]
        name = f"{Path(page).stem}-{width}" + (f"-table-{n}" if n else "")
        view.grab().save(str(shots / f"{name}.png"))
        if n == tables:
            report(result)
            return
        view.page().runJavaScript(SCROLL_TO_TABLE.format(n),
                                  lambda _: QTimer.singleShot(PAINT_MS, lambda: shoot(result, tables, n + 1)))

    def measured(text: str) -> None:
        result = json.loads(text)
        shoot(result, sum(b["kind"] == "table" for b in result["boxes"]))

    def loaded(ok: bool) -> None:
        if not ok:
            report({"error": "did not load"})
            return
        QTimer.singleShot(SETTLE_MS, lambda: view.page().runJavaScript(MEASURE, measured))

    timer.timeout.connect(lambda: report({"error": f"not loaded in {TIMEOUT_MS / 1000:g} s"}))
    view.loadFinished.connect(loaded)
    view.show()
    start()
    app.exec()
    return 1 if failed else 0


if __name__ == "__main__":
    jobs = [(spec.rpartition("@")[0], int(spec.rpartition("@")[2])) for spec in sys.argv[2:]]
    sys.exit(main(Path(sys.argv[1]), jobs))
