"""Uploads: bounded per client (count and bytes) and for every client together, so that no client fills the disk; an
upload Gradio refuses does not use up its client's quota, and a forwarded client address is believed only from a
configured proxy (issue 44, item 9); an uploaded file's text meets the rules typed text meets; a file nested too deeply
is a clear error; the sweep tab refuses a bad file with a clear message and runs a good one.

The count per client is checked on the running app (``python app.py``), each test from a loopback address of its own;
the byte bounds on the same middleware in-process, with its bounds lowered. The sweep tab runs in-process, on the
transformers engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import httpx
import pytest
import uvicorn
from waiting import PATIENT, Progress, patiently

import gcs
from conftest import refused_in_ui

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ui.server import http_limits  # noqa: E402
from ui.shared import limits  # noqa: E402
from ui.tabs import sweep  # noqa: E402

pytestmark = pytest.mark.usefixtures("transformers_engine")  # (tests/conftest.py: the page on vLLM is not theirs)


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


# -- 9. upload quotas: refusals do not count, forwarded addresses are not believed by default --------------------
def upload_status(app_url: str, progress, address: str, size: int = 1_000, headers: dict | None = None) -> int:
    """The status of one upload sent from ``address`` (a loopback address of its own: each test is its own
    client)."""
    def upload() -> int:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=PATIENT) as http:
            return http.post(f"{app_url}gradio_api/upload", headers=headers,
                             files={"files": ("groups.csv", b"x" * size, "text/csv")}).status_code

    return patiently(upload, f"an upload from {address}", progress)


@pytest.mark.slow
def test_an_upload_gradio_refuses_does_not_use_up_the_quota(app_url, app_progress):
    """Uploads were counted on arrival, so a file Gradio refused (over 1 MB: 413) spent its client's quota: 12
    refusals and 8 uploads, and the 21st got 429."""
    allowed = int(limits.LIMITS["uploads per client"].high)
    assert [upload_status(app_url, app_progress, "127.0.0.71", 1_500_000) for _ in range(3)] == [413] * 3
    assert [upload_status(app_url, app_progress, "127.0.0.71") for _ in range(allowed)] == [200] * allowed
    assert upload_status(app_url, app_progress, "127.0.0.71") == 429  # still bounded


@pytest.mark.slow
def test_a_forwarded_address_is_believed_only_from_a_configured_proxy(app_url, app_progress):
    """uvicorn believed X-Forwarded-For from 127.0.0.1, so any local client could spend another's upload quota (or
    dodge its own). No proxy is configured here (GCS_TRUSTED_PROXIES unset): the peer's address is the client. The
    spoofed upload is counted as 127.0.0.1's, one of its quota."""
    allowed = int(limits.LIMITS["uploads per client"].high)
    assert [upload_status(app_url, app_progress, "127.0.0.72") for _ in range(allowed - 1)] == [200] * (allowed - 1)
    assert upload_status(app_url, app_progress, "127.0.0.1", headers={"X-Forwarded-For": "127.0.0.72"}) == 200
    assert upload_status(app_url, app_progress, "127.0.0.72") == 200  # its own last one: the spoofed one was not its
    assert upload_status(app_url, app_progress, "127.0.0.72") == 429


def client_uvicorn_reports(forwarded_for: str, peer: str = "127.0.0.1") -> tuple:
    """The client address an app behind uvicorn (configured as Gradio configures it, from the environment) sees for
    a request from ``peer`` claiming ``forwarded_for``."""
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["client"][0])

    config = uvicorn.Config(app, log_config=None)  # (no logging set up in the test's process)
    config.load()
    scope = {"type": "http", "client": (peer, 5000), "headers": [(b"x-forwarded-for", forwarded_for.encode())]}
    asyncio.run(config.loaded_app(scope, None, None))
    return seen[0]


def test_the_proxies_believed_are_the_operator_s(monkeypatch, caplog):
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")  # uvicorn's default (restored after the test)
    monkeypatch.delenv("GCS_TRUSTED_PROXIES", raising=False)
    with caplog.at_level(logging.WARNING, logger="gcs.app"):
        assert http_limits.trusted_proxies() == ""
    assert "FORWARDED_ALLOW_IPS='127.0.0.1' is replaced by GCS_TRUSTED_PROXIES=''" in caplog.text
    assert client_uvicorn_reports("203.0.113.9") == "127.0.0.1"  # none trusted: the peer is the client
    monkeypatch.setenv("GCS_TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.1")
    assert http_limits.trusted_proxies() == "10.0.0.0/8,127.0.0.1/32"
    assert client_uvicorn_reports("203.0.113.9") == "203.0.113.9"  # a configured proxy's word is taken
    assert client_uvicorn_reports("203.0.113.9", peer="192.0.2.1") == "192.0.2.1"  # another peer's is not
    monkeypatch.setenv("GCS_TRUSTED_PROXIES", "*")
    with pytest.raises(ValueError, match=r"GCS_TRUSTED_PROXIES='\*': '\*' is not an IP address or network"):
        http_limits.trusted_proxies()


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


# -- the sweep tab's uploads ----------------------------------------------------------------------------------
def final(generator):
    """The last value a streaming handler yields (its result), running it to the end as Gradio does."""
    *_, last = generator
    return last


@pytest.mark.parametrize(
    "name, content, message",
    [("bad.jsonl", b'{"id": "a", "prompts": ["x", "y"]}\n{not json\n', "line 2: not valid JSON"),
     ("columns.csv", b"group,text\na,x\n", "missing column"),
     ("empty.jsonl", b"", "no groups"),
     ("binary.jsonl", bytes(range(256)), "not UTF-8"),
     ("big.jsonl", b'{"id": "a", "prompts": ["x", "y"]}\n' + b" " * 1_100_000, "over 1,000 kB")],
)
def test_bad_uploads_in_the_sweep_tab(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    refused_in_ui(lambda: list(sweep.sweep_ui("uploaded file", "", 2, str(path), "0,1", 1, ["is"], "e5", 8,
                                              gcs.DEFAULT_MODEL)), message)


def test_a_good_upload_runs_a_sweep(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("id,prompt\nsky,Why is the sky blue?\nsky,What makes the sky blue?\n")
    figure, table, csv_path, status = final(sweep.sweep_ui("uploaded file", "", 2, str(path), "1", 1, ["is", "gcswr"],
                                                   "jaccard", 8, gcs.DEFAULT_MODEL))
    assert len(table) == 2 and Path(csv_path).is_file() and len(figure.data) == 2
    # no constant columns (metric, ensemble), readable headers
    assert list(table.columns) == [sweep.CURVE_HEADERS[c]
                                   for c in ("method", "temperature", "mean", "stderr", "seeds", "n")]
    assert list(table.columns)[2:4] == ["mean consistency", "± std. error (by seed)"]
