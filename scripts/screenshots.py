"""Regenerate the Undo screen screenshots in docs/img (``make screenshots``; not run by tests).

Runs the demo scene into a temporary log, leaves a second saga ready to undo (as
``amends demo --serve`` does), serves both on 127.0.0.1 and photographs, at 375 and 1280 px
wide: the list of requests (what undo did or would do), the preview before the click, the
confirmation, and the report after it. Times are shown in the viewer's zone: the photographs
are taken in UTC, so they do not change with the machine's zone.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def main() -> int:
    import uvicorn
    from playwright.sync_api import sync_playwright

    import amends
    from amends.sandbox import demo_catalog
    from amends.sandbox.demo import run_demo
    from amends.server import ServerSettings, create_app
    from amends.server.demo import seed_ready_saga

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for width in (375, 1280):
            db = f"{tmp}/demo-{width}.db"
            run_demo(db)
            ready = asyncio.run(seed_ready_saga(db))
            catalog = demo_catalog(db)
            app = create_app(
                lambda c=catalog, d=db: amends.Engine(c, log=d), ServerSettings(no_auth=True)
            )
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
            thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
            thread.start()
            while not server.started:
                time.sleep(0.05)
            try:
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                    page = browser.new_page(
                        viewport={"width": width, "height": 900},
                        timezone_id="UTC",
                        locale="en-GB",
                    )
                    page.goto(f"http://127.0.0.1:{port}/")
                    page.screenshot(path=str(OUT / f"undo-list-{width}.png"), full_page=True)
                    page.goto(f"http://127.0.0.1:{port}/ui/sagas/{ready}")
                    page.screenshot(path=str(OUT / f"undo-before-{width}.png"), full_page=True)
                    page.click("#undo")
                    page.screenshot(path=str(OUT / f"undo-confirm-{width}.png"))
                    page.click("#confirm-yes")
                    page.locator("#headline").wait_for(timeout=30_000)
                    page.evaluate("window.scrollTo(0, 0)")
                    page.screenshot(path=str(OUT / f"undo-after-{width}.png"), full_page=True)
                    browser.close()
            finally:
                server.should_exit = True
                thread.join(10)
                sock.close()
    for f in sorted(OUT.glob("undo-*.png")):
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
