"""The page's front end, served as Gradio builds it but for two bundles whose work on every open tab nobody needs:
this module is the one place that reads Gradio's built JavaScript (a private API: ``ui.server.internals``'s table).

- Gradio's page-level loading tracker starts a requestAnimationFrame timer while the page loads and is removed
  before it sees the load end, so its timer asks for a frame 60 times a second for as long as the tab is open: about
  0.045 of a core here (headless chromium's whole idle use; 0.003 without it). A visitor waiting in the queue has a
  dozen pending outputs, each redrawing its timer's tenths in every frame: about 0.16 of a core in that tab (0.03-0.04
  once a second). The patched tracker times only while its output is pending, once a second.
- HighlightedText draws each colour of its colour map on a new canvas at every update: the response columns' streamed
  beats cost the browser most of its CPU during a side by side. The patched bundle converts each colour once.

Both are taken from the cores that generate where the browser runs beside the app (``bench/bench_browser.py``) and
from the visitor's battery on a Space. Where a bundle is not the one this knows, the page gets Gradio's, with a
WARNING saying what is lost.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ui.server.internals import gradio_tested
from ui.shared.logs import logger

FRONTEND_ASSETS = Path(gr.__file__).parent / "templates" / "frontend" / "assets"


class PatchedBundles:
    """ASGI middleware: a GET or HEAD of ``…/assets/<bundle>`` for a patched bundle (``patched_bundles``) is answered
    with the patched JavaScript; every other request goes on to the app."""

    def __init__(self, app, bundles: dict[str, bytes] | None = None):
        self.app = app
        self.bundles = patched_bundles() if bundles is None else bundles

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


# Gradio's status tracker (its minified bundle) times a pending output in a requestAnimationFrame loop that only
# stops when the tracker sees its status change. The page's loading tracker is removed before it sees its status
# change, so its loop never stops: every open tab then asks for a frame 60 times a second, forever. The loop, as
# built, and the same loop going on only while its status is pending (what a tracker still on the page does anyway),
# paced at one frame a second: at 60 frames a second (or 10) each pending output of a visitor waiting in the queue
# redraws its timer's tenths, about 0.16 of a core in that tab's browser for the whole wait (0.03-0.04 at one a
# second), on the cores that generate where the browser runs beside the app (bench/bench_browser.py --visitors 2).
TIMER_FRAMES_PER_SECOND = 1
TIMER_LOOP = "W&&ze()})}"
TIMER_LOOP_WHILE_PENDING = f"W&&o.status===`pending`&&setTimeout(ze,{1000 // TIMER_FRAMES_PER_SECOND})}})}}"


def quiet_status_trackers(assets: Path | None = None) -> dict[str, bytes]:
    """Gradio's status tracker bundle (file name -> the patched JavaScript) whose timer stops once nothing is pending
    and ticks once a second meanwhile, for the app to serve in place of Gradio's. Empty, with a WARNING, where the
    loop is not found once in exactly one bundle (another Gradio build): the page then keeps Gradio's loop.

    >>> sorted(quiet_status_trackers()) == sorted(p.name for p in FRONTEND_ASSETS.glob("statustracker-*.js"))
    True
    """
    return patched_bundle("statustracker-*.js", TIMER_LOOP, TIMER_LOOP_WHILE_PENDING, assets,
                          lost="the page keeps Gradio's status tracker timer loop (an animation frame 60 times a "
                               "second in every open tab)")


# Gradio's HighlightedText turns each colour of its colour map into rgba by drawing it on a new canvas and reading the
# pixel back, for every colour (twice: the colour and its half-transparent shade) at every update of its value. A
# streamed beat updates three response columns whose map holds 10 colours: 60 canvases, twice a second, on the cores
# that generate where the browser runs beside the app. The conversion depends on the colour alone, so the patched
# bundle keeps each answer for the page's life.
COLOR_TO_RGBA = ("function H(e,t){let n=document.createElement(`canvas`).getContext(`2d`);n.fillStyle=e,"
                 "n.fillRect(0,0,1,1);let[r,i,a]=n.getImageData(0,0,1,1).data;return`rgba(${r}, ${i}, ${a}, ${t})`}")
COLOR_TO_RGBA_ONCE = ("var gcsRgba=new Map;function H(e,t){let k=`${e}|${t}`,v=gcsRgba.get(k);if(v===void 0){"
                      "let n=document.createElement(`canvas`).getContext(`2d`);n.fillStyle=e,n.fillRect(0,0,1,1);"
                      "let[r,i,a]=n.getImageData(0,0,1,1).data;v=`rgba(${r}, ${i}, ${a}, ${t})`,gcsRgba.set(k,v)}"
                      "return v}")


def highlighted_text_colours(assets: Path | None = None) -> dict[str, bytes]:
    """Gradio's HighlightedText bundle (file name -> the patched JavaScript) converting each colour once per page;
    empty, with a WARNING, on another Gradio build (the page then converts them at every update, as Gradio does).

    >>> [name] = highlighted_text_colours(); name.startswith("Index-") and name.endswith(".js")
    True
    """
    return patched_bundle("Index-*.js", COLOR_TO_RGBA, COLOR_TO_RGBA_ONCE, assets,
                          lost="the page's response columns draw their colours on a new canvas at every update")


def patched_bundle(pattern: str, built: str, patched: str, assets: Path | None, *, lost: str) -> dict[str, bytes]:
    """The one bundle of Gradio's front end matching ``pattern`` that holds ``built`` exactly once, with ``patched``
    in its place (file name -> JavaScript); empty, with a WARNING saying what is ``lost``, where not exactly one
    does (another build) or outside the Gradio versions tested."""
    found = {}
    if gradio_tested():
        for path in sorted((assets or FRONTEND_ASSETS).glob(pattern)):
            text = path.read_text(encoding="utf-8")
            if text.count(built) == 1:
                found[path.name] = text.replace(built, patched).encode()
    if len(found) != 1:
        logger.warning("gradio %s: %s; its bundle changed", gr.__version__, lost)
        return {}
    return found


def patched_bundles(assets: Path | None = None) -> dict[str, bytes]:
    """Every patched bundle of Gradio's front end the app serves (file name -> JavaScript)."""
    return {**quiet_status_trackers(assets), **highlighted_text_colours(assets)}
