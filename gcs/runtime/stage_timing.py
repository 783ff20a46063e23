"""Where a run's time goes, for whoever asks: each stage (a round's generation, each metric's scoring, the page's
figures) logs one DEBUG line on the ``gcs.timing`` logger, nothing when that level is off.

    logging.getLogger("gcs.timing").setLevel(logging.DEBUG)   # then, per stage, a line such as
    # timing {"stage": "score", "metric": "e5", "texts": 36, "seconds": 0.41, "end": 1790000000.12}

``end`` is the wall clock (``time.time()``) when the stage ended, so a browser on the same machine can line its
own timings up with the server's (``bench/bench_browser.py`` does).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time

logger = logging.getLogger("gcs.timing")
PREFIX = "timing "  # what a reader of the log looks for (``parse``)


@contextlib.contextmanager
def timed(stage: str, **details):
    """Log how long the ``with`` block took as ``stage`` (with ``details``), at DEBUG; costs nothing when off."""
    if not logger.isEnabledFor(logging.DEBUG):
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        mark(stage, seconds=round(time.perf_counter() - start, 4), **details)


def mark(stage: str, **details) -> None:
    """Log that ``stage`` happened now (at DEBUG), e.g. the moment the page hands an update to Gradio."""
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s%s", PREFIX, json.dumps({"stage": stage, **details, "end": round(time.time(), 4)}))


def parse(line: str) -> dict | None:
    """The record of one log line written by ``timed`` or ``mark``, or None for any other line.

    >>> parse('12:00:01 gcs.timing DEBUG timing {"stage": "score", "seconds": 0.5, "end": 1.0}')
    {'stage': 'score', 'seconds': 0.5, 'end': 1.0}
    >>> parse("12:00:01 gcs.app INFO something else") is None
    True
    """
    at = line.find(PREFIX + "{")
    if at < 0:
        return None
    try:
        return json.loads(line[at + len(PREFIX):])
    except ValueError:
        return None
