"""The app's log: secrets are redacted (in tracebacks too), no record or printed line can forge a log line (control
characters escaped), what a refused call carries never reaches the log whole, a long traceback keeps the line that
names its error, what the server prints reaches the log file line by line, and a refused request is one line there,
never a traceback.

The log of the running app (``python app.py``, the session's ``app_log``) is read as a refusal is answered, waiting
for the line it needs to see, never for a fixed time; ``ui.shared.logs``'s filter and stream are also checked
in-process.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from pathlib import Path

import httpx
import pytest
from waiting import patiently, served, until

from conftest import error_text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ui.shared import logs  # noqa: E402


# -- secrets are redacted ---------------------------------------------------------------------------------------
def test_redaction_covers_tracebacks_and_headers():
    handler_output = []

    class Collect(logging.Handler):
        def emit(self, record):
            handler_output.append(self.format(record))

    handler = Collect()
    handler.addFilter(logs.RedactSecrets())
    logger = logging.getLogger("gcs.test-redaction")
    logger.addHandler(handler)
    try:
        try:
            raise RuntimeError('failed with token=abc123 HF_TOKEN=hf_abcdefghijklmnopqrstuvwx {"token": "s3cr3t"}')
        except RuntimeError:
            logger.exception("Authorization: Bearer eyJhbGciOi.payload.sig for user")
    finally:
        logger.removeHandler(handler)
    (text,) = handler_output
    assert "Traceback" in text
    for secret in ("abc123", "hf_abcdefghijklmnopqrstuvwx", "s3cr3t", "eyJhbGciOi"):
        assert secret not in text


def test_secrets_never_reach_the_log(caplog):
    record = logging.LogRecord("gcs.app", logging.INFO, __file__, 1, "loading with %s and token=%s",
                               ("hf_abcdefghijklmnopqrstuvwxyz123456", "s3cr3t"), None)
    assert logs.RedactSecrets().filter(record)
    assert record.getMessage() == "loading with [redacted] and [redacted]"


@pytest.mark.slow
def test_what_a_refused_raw_call_carries_never_reaches_the_log_whole(app_url, app_log, app_progress):
    secret = "hf_" + "A1b2C3d4E5f6G7h8I9j0K" * 2
    huge = "why " * 200_000  # under the body limit, far over anything a log should hold
    before = app_log.read_text().count("refused a call to trace with 1 of its 7 values")
    for data in ([f"HF_TOKEN={secret}"], [huge]):
        response = served("POST", app_url + "gradio_api/call/trace", app_progress, json={"data": data})
        assert response.status_code == 400 and "this endpoint takes 7 values" in response.text  # no echo, no addresses
        assert secret not in response.text and len(response.text) < 1_000
    # Both refusals were answered, so whatever their handling printed has been written (the app writes its output
    # through at each line end); wait for the app's own line about each refusal, however slow the machine.
    marker = "refused a call to trace with 1 of its 7 values"
    until(lambda: app_log.read_text().count(marker) >= before + 2, "the refusals' lines", app_progress)
    log = app_log.read_text()
    assert secret not in log
    assert "why " * 2_000 not in log  # cut, not copied whole


# -- forged log lines -------------------------------------------------------------------------------------------
FORGED = "x\n2026-01-01 00:00:00,000 gcs.app ERROR forged\x1b[2J"


@pytest.mark.slow
def test_an_mcp_tool_name_cannot_forge_a_log_line(app_url, app_log, app_progress):
    async def call():
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with httpx.AsyncClient(timeout=None) as http, \
                streamable_http_client(f"{app_url}gradio_api/mcp/", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool(FORGED, {})

    before = len(app_log.read_text())
    assert patiently(lambda: asyncio.run(call()), "the MCP call", app_progress).isError
    until(lambda: "forged" in app_log.read_text()[before:], "mcp's line about the unknown tool", app_progress)
    added = app_log.read_text()[before:]
    assert "\x1b" not in added and not any(line.startswith("2026-01-01") for line in added.splitlines()), added


def test_every_logger_s_records_and_every_printed_line_have_their_controls_escaped():
    stream = io.StringIO()
    handler = logging.StreamHandler(logs.RedactingStream(stream))
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    handler.addFilter(logs.RedactSecrets())
    third_party = logging.getLogger("mcp.server.lowlevel.test")
    third_party.addHandler(handler)
    try:
        third_party.warning("Tool %r not listed", FORGED)
        try:
            raise ValueError("bad\x1b[2J value")
        except ValueError:
            third_party.exception("failed")
    finally:
        third_party.removeHandler(handler)
    print("printed\x1b[31m red\r over", file=logs.RedactingStream(stream))
    written = stream.getvalue()
    assert "\x1b" not in written and "\r" not in written and "\\x1b[2J" in written
    assert not any(line.startswith("2026") for line in written.splitlines())
    assert "Traceback (most recent call last):\n" in written  # a traceback keeps its line breaks


# -- what reaches the log, and when -----------------------------------------------------------------------------
def test_a_long_traceback_keeps_its_last_line():
    """Each write was cut after 4,000 characters: a long traceback lost the line that names the error."""
    stream = io.StringIO()
    frames = "".join(f'  File "/x/module{i}.py", line {i}, in f\n    call()\n' for i in range(200))
    logs.RedactingStream(stream).write(f"Traceback (most recent call last):\n{frames}ValueError: the error itself\n")
    written = stream.getvalue()
    assert written.endswith("ValueError: the error itself\n") and "characters cut" in written
    assert len(written) < logs.RedactingStream.HEAD + logs.RedactingStream.TAIL + 100


def test_what_the_server_prints_reaches_its_log_file_line_by_line(tmp_path):
    """stdout to a file is block-buffered: a refused call's echo (or anything printed) would reach the log late,
    so a check of the log could pass before it arrived. Each finished line is written through."""
    with open(tmp_path / "app.log", "w") as file:
        stream = logs.RedactingStream(file)
        print("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx printed", file=stream)
        assert (tmp_path / "app.log").read_text() == "[redacted] printed\n"


# -- a refused request is one line, never a traceback -----------------------------------------------------------
@pytest.mark.slow
def test_a_refused_request_logs_one_line(client, app_log, app_progress):
    before = app_log.read_text()
    message = error_text(lambda: client.predict("only one line", 1.0, 8, 1, api_name="/compare"))
    assert "enter 2 to 8 paraphrases" in message
    # the log is written by another process: wait for the line, however slow
    until(lambda: "refused: enter 2 to 8 paraphrases" in app_log.read_text()[len(before):], "the refusal's line",
          app_progress)
    added = app_log.read_text()[len(before):]
    assert "Traceback" not in added, added[-3000:]
    assert len([line for line in added.splitlines() if "enter 2 to 8" in line]) == 1, added[-3000:]
