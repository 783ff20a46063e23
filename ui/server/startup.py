"""A launch that a loaded machine slows down but does not break.

Before it serves, ``Blocks.launch`` checks that its own page answers (``gradio.networking.url_ok``: a HEAD of the
local URL, given 3 s) and refuses to start without a share link if not: "When localhost is not accessible, a
shareable link must be created". At load 14-17 on 2 cores the app's first page took longer than 3 s, and the app
exited after its whole start-up. ``patient_launch_check`` keeps the check (a page that cannot be reached still stops
the launch) but waits for the answer: connecting keeps Gradio's 3 s (a loopback connection is the kernel's work,
however loaded the machine), and the answer, from this process's own server, is waited for as long as it takes.
"""

from __future__ import annotations

import time

import httpx

from ui.server import internals

GRADIO_URL_OK = internals.GRADIO_URL_OK  # Gradio's own check, as imported (before any patch)
ANSWERED = (200, 401, 301, 302, 303, 307, 308)  # Gradio's: auth and redirects answer too
CONNECT_S = 3


def _answers(url: str) -> bool:
    """Whether the server at ``url`` answers a HEAD (up to 5 tries, as Gradio's check)."""
    for _ in range(5):
        try:
            if httpx.head(url, timeout=httpx.Timeout(None, connect=CONNECT_S), verify=False).status_code in ANSWERED:
                return True
        except httpx.HTTPError:
            return False
        time.sleep(0.5)
    return False


def patient_launch_check() -> bool:
    """Make ``Blocks.launch``'s reachability check wait for the page's answer (call before ``launch``); whether it
    does. ``gradio.networking.url_ok`` is private (``ui.server.internals.replace_url_ok``): outside the Gradio versions
    tested (``ui.server.internals.gradio_tested``), or where it is gone, Gradio's own 3 s check stays, with a
    WARNING."""
    return internals.replace_url_ok(_answers)
