"""The page's front end, served as Gradio builds it but for one fix: a status tracker's timer that outlives it and
redraws 60 times a second.

Gradio's page-level loading tracker starts a requestAnimationFrame timer while the page loads and is removed before
it sees the load end, so its timer goes on asking for a frame 60 times a second for as long as the tab is open,
idle or not: about 0.045 of a core here (headless chromium's whole idle use; 0.003 without it), taken from the
cores that generate when the browser runs beside the app (``bench/bench_browser.py`` counts it as "scheduled in
the page"), and from the visitor's battery on a Space. ``QuietStatusTrackers`` serves Gradio's status tracker bundle
with that loop going on only while its output is pending, and then once a second: a visitor waiting in the queue has
a dozen pending outputs, each redrawing its timer's tenths in every frame, about 0.16 of a core in that tab for the
whole wait (0.03-0.04 once a second; ``ui.internals.quiet_status_trackers``). Where the bundle is not the one it
knows, the page is Gradio's as it is.
"""

from __future__ import annotations

from .internals import quiet_status_trackers


class QuietStatusTrackers:
    """ASGI middleware: a GET or HEAD of ``…/assets/<bundle>`` for a patched status tracker bundle is answered with
    the patched JavaScript; every other request goes on to the app."""

    def __init__(self, app, bundles: dict[str, bytes] | None = None):
        self.app = app
        self.bundles = quiet_status_trackers() if bundles is None else bundles

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and self.bundles:
            folder, _, name = scope["path"].rpartition("/")
            body = self.bundles.get(name) if folder.endswith("/assets") else None
            if body is not None:
                await send({"type": "http.response.start", "status": 200, "headers": [
                    (b"content-type", b"text/javascript; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-cache")]})  # fetched again on each load: no stale copy of another build
                await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})
                return
        await self.app(scope, receive, send)
