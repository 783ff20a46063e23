"""The app's lanes: a model job holds the model lane, at most the waiting limit's calls wait behind it and the rest
are told the queue is full, while the light endpoints answer in a lane of their own; the browse lane's threads
tokenize with tokenizers of their own beside generation's padded batches.

The full lane is the app as ``app.py`` builds it, served in this process with a job that holds the lane until the
test lets go: nothing depends on how fast the machine is. (The same full queue against ``python app.py``:
tests/test_faults.py.)
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from waiting import Progress, app_client, served, until

from conftest import call_outcome, free_port

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ui.server.startup import patient_launch_check  # noqa: E402
from ui.tabs.side_by_side import compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("transformers_engine")  # (tests/conftest.py: the page on vLLM is not theirs)

PARAPHRASES = "What is DNA?\nExplain what DNA is."


# -- light endpoints have their own capacity: a full model lane does not refuse them ----------------------------
def _queue_size(app_url, progress) -> int:
    return served("GET", app_url.rstrip("/") + "/gradio_api/queue/status", progress).json()["queue_size"]


HOLD = "Hold the model lane until the test lets go.\nHold it, please."


@pytest.fixture
def held_lane_app(monkeypatch):
    """(url, release, progress): the app as ``app.py`` builds it (the fixture's waiting limit of 4), served in this
    process, where a /compare of the ``HOLD`` paraphrases streams progress until the test sets ``release``: a model
    job that provably holds the lane, however fast the machine. Every other request runs as usual."""
    import ui

    release, run = threading.Event(), compare._run

    def held(prompts, settings, model, streaming, stop=None):
        if "\n".join(prompts) != HOLD:
            yield from run(prompts, settings, model, streaming, stop)
            return
        while not release.wait(0.05):
            yield None  # a step: the handler streams progress
        raise ValueError("released by the test")

    monkeypatch.setattr(compare, "_run", held)
    patient_launch_check()  # (as app.py launches: its check of its own page waits for the answer)
    demo = ui.build(queue_size=4)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        yield url, release, Progress()  # (served in this process: its threads' work is the app's progress)
    finally:
        release.set()
        demo.close()


@pytest.mark.slow
def test_coupling_answers_while_the_model_lane_is_full(held_lane_app):
    """A model job holds the lane until released; a burst of 10 more arrives at once: exactly 4 (the waiting limit)
    wait and 6 are told the queue is full, while the coupling explorer answers in its own lane. Released, the
    lane serves the 4 waiting ones. Nothing here depends on how fast the machine is."""
    url, release, progress = held_lane_app  # no client gives up on a busy machine: each waits on the app's progress
    holder = app_client(url, progress).submit(HOLD, 1.0, 8, 1, rounds=False, api_name="/compare")
    until(lambda: holder.outputs() or holder.done(), "the held job to stream progress", progress)
    assert not holder.done(), holder.exception()
    outcomes, lock = [], threading.Lock()

    def one_client():
        outcome = call_outcome(url, progress, PARAPHRASES, 0.0, 4, 1, api_name="/compare")
        with lock:
            outcomes.append(outcome)

    with ThreadPoolExecutor(10) as burst:
        for _ in range(10):
            burst.submit(one_client)
        until(lambda: len(outcomes) + _queue_size(url, progress) >= 10, "every request of the burst to be placed",
              progress)
        assert _queue_size(url, progress) == 4 and sorted(outcomes) == ["queue full"] * 6, outcomes
        light = app_client(url, progress)
        for _ in range(3):
            assert light.predict(api_name="/coupling", trials=500, steps=500)["curve"]
        assert _queue_size(url, progress) == 4 and not holder.done(), "the held job left the lane before its release"
        release.set()
    assert sorted(outcomes) == ["queue full"] * 6 + ["served"] * 4, outcomes
    with pytest.raises(Exception, match="released by the test"):
        holder.result()


# -- the browse lane's tokenizers ---------------------------------------------------------------------------------
def test_the_browse_lane_tokenizes_with_its_own_tokenizer_beside_generation():
    """A fast tokenizer keeps padding state between calls: two threads sharing one built padded batches with each
    other's settings. Each browse thread gets its own copy, and tokenizing beside a padded batch is safe."""
    import threading
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import gcs
    from ui.shared import deployment

    model = deployment.load_allowed_model(gcs.DEFAULT_MODEL)
    mine, errors = {}, []

    def browse(name: str):
        tokenizer = deployment.thread_tokenizer(gcs.DEFAULT_MODEL)
        mine[name] = tokenizer
        try:
            for _ in range(1500):
                tokenizer.encode("the spans of a response " * 5, add_special_tokens=False)
        except Exception as error:  # noqa: BLE001 - any failure is the finding
            errors.append(repr(error))

    def generate_side():
        try:
            for _ in range(200):
                model.tokenizer(["short"] * 5 + ["a much longer text " * 20], padding=True, padding_side="left",
                                return_tensors="pt")
        except Exception as error:  # noqa: BLE001
            errors.append(repr(error))

    threads = [threading.Thread(target=browse, args=(f"b{i}",)) for i in range(3)]
    threads.append(threading.Thread(target=generate_side))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:2]
    assert len({id(t) for t in mine.values()}) == 3 and model.tokenizer not in mine.values()
