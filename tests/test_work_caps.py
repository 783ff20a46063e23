"""Caps on the work one request can ask of the model: a method named twice runs once, a request's total tokens of
work (every row's prompt and new tokens) are capped, on /compare and on /hindsight, and every model endpoint caps each
paraphrase's tokens as the model sees them (not its characters).

The endpoints are called through gradio_client against the running app (``python app.py``); /hindsight's cap, which
its own limits keep under the shared one, is checked in-process with the cap lowered.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import error_text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ui  # noqa: E402
from ui.shared import limits  # noqa: E402
from ui.tabs import hindsight  # noqa: E402

PARAPHRASES = "What is DNA?\nExplain what DNA is."
HIEROGLYPHS = "\U00013000" * 1000  # 1,000 characters, about 4,000 tokens


# -- repeated methods, and the total work ---------------------------------------------------------------------
@pytest.mark.slow
def test_repeated_methods_run_once(client):
    result = client.predict(PARAPHRASES, 0.0, 4, 1, 1.0, ",".join(["is"] * 150), api_name="/compare")
    assert list(result["responses"]) == ["is"] and len(result["responses"]["is"]) == 2


@pytest.mark.slow
def test_total_work_is_capped(client):
    eight = "\n".join(f"Question number {i}: " + "why is the sky blue and not green? " * 12 for i in range(8))
    message = error_text(lambda: client.predict(eight, 1.0, 256, 16, 1.0, "is,gcs,gcswr", 2,
                                                 api_name="/compare"))
    assert "tokens of work" in message and "the limit here is 32,768" in message
    long_one = "What is DNA?\n" + "1 2 3 4 5 6 7 8 9 " * 55  # under 1,000 characters, ~500 tokens
    assert "tokens long as the model sees it" in error_text(lambda: client.predict(long_one, 1.0, 8, 1,
                                                                                    api_name="/compare"))


def test_hindsight_s_total_work_is_capped(monkeypatch):
    """Within /hindsight's own limits (5 texts of 256 tokens, 256 response and 256 new tokens) the work stays
    under the shared cap, so only a lower cap shows that /hindsight checks it: every text's prompt, the response
    forced through it and the new tokens count."""
    worst = 5 * (limits.LIMITS["prompt tokens"].high + limits.LIMITS["hindsight response tokens"].high
                 + limits.LIMITS["max_new_tokens"].high)
    assert worst <= limits.LIMITS["work tokens"].high
    monkeypatch.setitem(limits.LIMITS, "work tokens", limits.Limit(1, 600, whole=True))
    arguments = ("Why is the sky blue?", "Because of Rayleigh scattering.", "Why's the sky blue?\nWhat makes it blue?",
                 "gcswr", 0, 1.0, 1.0, 256, ui.DEFAULT_MODEL)
    with pytest.raises(ValueError, match=r"this request is [\d,]+ tokens of work .* the limit here is 600"):
        hindsight.hindsight_inputs(*arguments)
    assert hindsight.hindsight_inputs(*arguments[:7], 64, ui.DEFAULT_MODEL)["max_new_tokens"] == 64  # under it


# -- each paraphrase's tokens ---------------------------------------------------------------------------------
@pytest.mark.parametrize("endpoint, arguments", [
    ("/trace", (f"{HIEROGLYPHS}\nWhy is the sky blue?",)),
    ("/hindsight", (HIEROGLYPHS, "Blue.", "Why is the sky blue?")),
    ("/hindsight", ("Why is the sky blue?", "Blue.", HIEROGLYPHS)),
    ("/counterfactual", (HIEROGLYPHS, "Blue.", 0, " Red")),
])
@pytest.mark.slow
def test_every_model_endpoint_caps_a_paraphrase_s_tokens(client, endpoint, arguments):
    assert "tokens long as the model sees it" in error_text(lambda: client.predict(*arguments, api_name=endpoint))
