"""Uploads: bounded per client (count and bytes) and for every client together, so that no client fills the disk;
an uploaded file's text meets the rules typed text meets; a file nested too deeply is a clear error.

The count per client is checked on the running app (``python app.py``), each test from a loopback address of its own;
the byte bounds on the same middleware in-process, with its bounds lowered. (An upload Gradio refuses, and a
forwarded client address: tests/test_http_guard.py.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from waiting import Progress, patiently

import gcs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ui import http_limits, limits, sweep  # noqa: E402


# -- uploads are bounded per client and in total ------------------------------------------------------------
def upload_from(app_url: str, address: str, progress: Progress, size: int = 1_000) -> httpx.Response:
    """One upload, sent from ``address`` (a loopback address of its own: each test is its own client)."""
    def upload():
        with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=None) as http:
            return http.post(f"{app_url}gradio_api/upload", files={"files": ("groups.csv", b"x" * size, "text/csv")})

    return patiently(upload, "an upload's answer", progress)


@pytest.mark.slow
def test_one_client_s_uploads_are_bounded(app_url, app_progress):
    """100 uploads of 1 MB from one client were accepted in 1.2 s, each kept an hour: one client filled the disk."""
    allowed = int(limits.LIMITS["uploads per client"].high)
    answers = [upload_from(app_url, "127.0.0.33", app_progress) for _ in range(allowed + 3)]
    assert [a.status_code for a in answers] == [200] * allowed + [429] * 3
    assert "uploads are at their limit (uploads per client: 20 within 70 minutes)" in answers[-1].json()["error"]
    assert upload_from(app_url, "127.0.0.34", app_progress).status_code == 200  # another client is not held back


def test_every_client_s_uploads_are_bounded_in_total(monkeypatch):
    """The same middleware, its bounds lowered: bytes per client, then every client together (the clock moves on
    past the time a file lives, and the count starts again)."""
    monkeypatch.setitem(limits.LIMITS, "upload bytes per client", limits.Limit(1, 2_500, whole=True))
    monkeypatch.setitem(limits.LIMITS, "upload bytes in total", limits.Limit(1, 5_000, whole=True))
    now = [0.0]
    quota = http_limits.UploadQuota(None, clock=lambda: now[0])
    assert [quota.refusal("a", 1_000) for _ in range(2)] == [None, None]
    assert quota.refusal("a", 1_000)[0] == 429  # 3,000 bytes from one client
    assert [quota.refusal(client, 1_000) for client in "bc"] == [None, None]
    status, message = quota.refusal("d", 1_200)
    assert status == 503 and "the server's uploads are at their limit (upload bytes in total: 5,000" in message
    now[0] += http_limits.UPLOAD_WINDOW_S + 1
    assert quota.refusal("d", 1_200) is None


# -- what an uploaded file holds --------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt, message", [
    ("Why is the sky\x1b[2J blue?", "contains control characters"),
    ("Why is the sky blue?\u202e", "contains invisible or direction-overriding"),
    ("\u200b\u200b", "shows nothing"),
])
def test_an_uploaded_file_s_text_meets_the_rules_typed_text_meets(tmp_path, prompt, message):
    path = tmp_path / "groups.jsonl"
    path.write_text(json.dumps({"id": "sky", "prompts": [prompt, "What makes the sky blue?"]}) + "\n")
    with pytest.raises(ValueError, match=f"group 'sky', paraphrase 1 {message}"):
        sweep.sweep_groups("uploaded file", "", 0, str(path))


def test_deeply_nested_json_upload_is_a_clear_error():
    with pytest.raises(ValueError, match="line 1: JSON nested too deeply"):
        gcs.parse_groups("[" * 100_000 + "]" * 100_000, "jsonl")
