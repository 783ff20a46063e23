"""Threads per decode step (``gcs.engines.threads``): the choice between torch's thread count and one thread, the probe
that guards it, and the premise that a token never depends on it."""

from __future__ import annotations

import pytest
import torch

import gcs
from gcs.engines import threads
from gcs.engines.threads import FIRST_WAIT, TRIAL, WINDOW, ThreadChoice, threads_agree
from conftest import tiny_gcs_model

QUIET, BUSY = (0.040, 0.039), (0.300, 0.120)  # (wall, CPU) seconds of a step with its cores, and beside another job


def feed(choice: ThreadChoice, steps) -> list[int]:
    return [choice.observe(*step) for step in steps]


def test_on_free_cores_every_step_keeps_every_thread():
    assert feed(ThreadChoice(2), [QUIET] * 100) == [2] * 100


def test_beside_another_job_one_thread_is_tried_and_kept_when_faster():
    choice = ThreadChoice(4)
    got = feed(choice, [BUSY] * WINDOW)
    assert got == [4] * (WINDOW - 1) + [1]  # the CPU share fell for a whole window: a try
    assert feed(choice, [(0.080, 0.070)] * TRIAL + [(0.080, 0.055)] * 50) == [1] * (TRIAL + 50)  # kept, and stays


def test_a_try_that_is_not_faster_goes_back_and_waits_twice_as_long():
    choice = ThreadChoice(2)
    feed(choice, [BUSY] * WINDOW)
    assert choice.threads == 1
    assert feed(choice, [(0.290, 0.200)] * TRIAL) == [1] * (TRIAL - 1) + [2]  # not under GAIN of the steps before
    got = feed(choice, [BUSY] * (2 * FIRST_WAIT))
    assert got == [2] * (2 * FIRST_WAIT - 1) + [1]  # the next try after twice the wait


def test_on_one_thread_free_cores_bring_every_thread_back():
    choice = ThreadChoice(2)
    feed(choice, [BUSY] * WINDOW + [(0.080, 0.060)] * TRIAL)
    assert choice.threads == 1
    got = feed(choice, [(0.060, 0.059)] * WINDOW + [(0.040, 0.039)] * TRIAL)
    assert got[WINDOW - 1] == 2 and got[-1] == 2  # the share rose: all threads tried, faster, kept


def test_a_refused_try_is_never_made_again():
    choice = ThreadChoice(2)
    feed(choice, [BUSY] * WINDOW)
    choice.refuse()
    assert feed(choice, [BUSY] * 200) == [2] * 200


def test_one_thread_has_nothing_to_choose():
    assert feed(ThreadChoice(1), [BUSY] * 50) == [1] * 50


@pytest.mark.parametrize("ceiling", [0, -1, 1.5, None])
def test_a_bad_ceiling_is_refused_by_name(ceiling):
    with pytest.raises(ValueError, match="ceiling"):
        ThreadChoice(ceiling)


def test_a_bad_setting_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("GCS_THREADS", "sometimes")
    with pytest.raises(ValueError, match="GCS_THREADS='sometimes'"):
        threads.adapting(torch.device("cpu"))


def alternating(monkeypatch) -> list[int]:
    """Every decode step on the other thread count (1, then torch's, ...), whatever the timing: the thread counts
    the steps ran on are recorded in the returned list."""
    ran = []

    def observe(self, seconds, cpu_seconds):
        ran.append(self.threads)
        self.home = self.threads
        self.threads = 1 if self.threads == self.ceiling else self.ceiling
        return self.threads

    monkeypatch.setattr(ThreadChoice, "observe", observe)
    monkeypatch.setenv("GCS_THREADS", "auto")
    return ran


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_at_the_defaults_a_token_never_depends_on_the_threads_of_its_step(embedded_model, monkeypatch,
                                                                          two_threads):
    """The premise, on the embedded model at the default dtype: a decode step gives the same logits on one thread
    as on two (the probe), and every method's tokens are the same with the steps' threads switching at every step
    as on two threads throughout. The thread count comes back when the call ends."""
    paraphrases = ["Why is the sky blue?", "What makes the sky look blue?", "Explain the blue colour of the sky."]
    settings = gcs.SamplingSettings(seeds=[0, 1], max_new_tokens=24, top_p=0.95)
    monkeypatch.setenv("GCS_THREADS", "fixed")
    fixed = gcs.compare(paraphrases, settings=settings, model=embedded_model)
    assert threads_agree(embedded_model.model, len(fixed), 2, 1)
    ran = alternating(monkeypatch)
    switching = gcs.compare(paraphrases, settings=settings, model=embedded_model)
    assert {1, 2} <= set(ran) and len(ran) >= 20  # the steps ran on both counts
    assert switching["response"].tolist() == fixed["response"].tolist()
    assert torch.get_num_threads() == 2


def test_where_one_thread_computes_other_logits_it_is_never_used(monkeypatch, two_threads):
    """A model whose logits depend on the thread count (a hook adds it): the probe says so, every step stays on
    torch's threads, and the tokens are those of a run that never switches."""
    model = tiny_gcs_model()
    tilt = torch.linspace(0, 3, model.model.config.vocab_size)  # the distribution itself changes with the threads
    model.model.lm_head.register_forward_hook(lambda module, args, out: out + tilt * torch.get_num_threads())
    assert not threads_agree(model.model, 6, 2, 1)
    monkeypatch.setenv("GCS_THREADS", "fixed")
    fixed = gcs.compare(["w3 w4", "w5 w6 w7"], settings=gcs.SamplingSettings(max_new_tokens=12), model=model)
    monkeypatch.setenv("GCS_THREADS", "auto")
    counts = []
    refuse = ThreadChoice.refuse

    def recorded(self):
        counts.append(torch.get_num_threads())
        refuse(self)

    monkeypatch.setattr(ThreadChoice, "refuse", recorded)
    monkeypatch.setattr(ThreadChoice, "observe", lambda self, seconds, cpu: 1)  # asks for one thread at every step
    adapted = gcs.compare(["w3 w4", "w5 w6 w7"], settings=gcs.SamplingSettings(max_new_tokens=12), model=model)
    assert counts and set(counts) == {2}  # refused, on two threads
    assert adapted["response"].tolist() == fixed["response"].tolist()


def test_the_thread_count_comes_back_after_a_failed_step(monkeypatch, two_threads):
    ran = alternating(monkeypatch)
    model = tiny_gcs_model()

    def fail_on_one_thread(module, args, out):
        if torch.get_num_threads() == 1 and len(ran) > 3:
            raise RuntimeError("a failure on one thread")
        return out

    model.model.lm_head.register_forward_hook(fail_on_one_thread)
    with pytest.raises(RuntimeError, match="a failure on one thread"):
        gcs.generate(["w3 w4"], "gcswr", max_new_tokens=30, model=model, min_new_tokens=30)
    assert 1 in ran and torch.get_num_threads() == 2
