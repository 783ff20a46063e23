"""Threads per decode step (``gcs.engines.threads``): the choice between torch's thread count and one thread, the probe
that guards it, and the premise that a token never depends on it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import gcs
from conftest import tiny_gcs_model
from gcs.engines import threads
from gcs.engines.threads import FIRST_WAIT, FREE_WINDOW, TRIES_NOT_KEPT, WINDOW, ThreadChoice, threads_agree
from gcs.runtime import internals

QUIET, BUSY = (0.040, 0.039), (0.300, 0.120)  # (wall, CPU) seconds of a step with its cores, and beside another job


def feed(choice: ThreadChoice, steps) -> list[int]:
    return [choice.observe(*step) for step in steps]


def test_on_free_cores_every_step_keeps_every_thread():
    assert feed(ThreadChoice(2), [QUIET] * 100) == [2] * 100


def test_beside_another_job_one_thread_is_tried_and_kept_when_faster():
    choice = ThreadChoice(4)
    got = feed(choice, [BUSY] * WINDOW)
    assert got == [4] * (WINDOW - 1) + [1]  # the CPU share fell for a whole window: a try
    assert feed(choice, [(0.080, 0.070)] + [(0.080, 0.055)] * 50) == [1] * 51  # kept, and stays


def test_bursts_of_another_job_leave_every_thread():
    """A browser drawing the page on the same cores takes them in bursts: some steps keep their cores, so nothing is
    tried (one thread would be slower there)."""
    assert feed(ThreadChoice(2), [BUSY, BUSY, BUSY, QUIET] * 50) == [2] * 200


def test_a_try_that_is_not_faster_goes_back_and_waits_twice_as_long():
    choice = ThreadChoice(2)
    feed(choice, [BUSY] * WINDOW)
    assert choice.threads == 1
    assert feed(choice, [(0.290, 0.200)]) == [2]  # not under GAIN of the steps before
    got = feed(choice, [BUSY] * (2 * FIRST_WAIT))
    assert got == [2] * (2 * FIRST_WAIT - 1) + [1]  # the next try after twice the wait


def test_after_some_tries_not_kept_none_is_made():
    choice = ThreadChoice(2)
    tries = 0
    for _ in range(1000):
        if choice.observe(*BUSY) == 1:
            tries += 1
            assert choice.observe(0.290, 0.200) == 2  # not faster
    assert tries == TRIES_NOT_KEPT


def test_on_one_thread_free_cores_bring_every_thread_back():
    choice = ThreadChoice(2)
    feed(choice, [BUSY] * WINDOW + [(0.080, 0.060)])
    assert choice.threads == 1
    got = feed(choice, [(0.060, 0.059)] * FREE_WINDOW + [(0.040, 0.039)])
    assert got[:FREE_WINDOW - 1] == [1] * (FREE_WINDOW - 1)  # a whole window with the share up first...
    assert got[FREE_WINDOW - 1] == 2 and got[-1] == 2  # ...then all threads tried, faster, kept


def test_on_one_thread_a_share_that_is_not_clearly_up_tries_nothing():
    """A wrong try of all threads beside a busy job costs far more than a step on one thread: the window is long and
    the bar high."""
    choice = ThreadChoice(2)
    feed(choice, [BUSY] * WINDOW + [(0.080, 0.060)])
    assert feed(choice, [(0.060, 0.054)] * 200) == [1] * 200  # a share of 0.9


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


def in_a_fresh_process(function) -> None:
    """Run ``function`` (module level, no arguments) in a fresh interpreter, failing here with its traceback: a vLLM
    engine another test started in this worker pins torch's thread count for the rest of the process. (A plain
    subprocess: a multiprocessing.Pool's worker twice waited forever for its task inside the suite.)"""
    result = subprocess.run([sys.executable, "-c", f"import test_threads; test_threads.{function.__name__}()"],
                            cwd=Path(__file__).parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


def alternating() -> list[int]:
    """Every decode step on the other thread count (1, then 2, ...), whatever the timing (in a fresh process: nothing
    is put back); returns the thread counts the steps ran on, as torch saw them."""
    ran = []

    def observe(self, seconds, cpu_seconds):
        ran.append(torch.get_num_threads())
        self.threads = self.home
        return self.threads

    ThreadChoice.observe = observe
    return ran


def premise_at_the_defaults():
    torch.set_num_threads(2)
    model = gcs.load_model()
    paraphrases = ["Why is the sky blue?", "Explain the blue colour of the sky."]
    settings = gcs.SamplingSettings(seeds=[0], max_new_tokens=14, top_p=0.95)  # two threads beside the suite's other
    # worker are slow: the smallest run that still switches at every step of every method
    os.environ["GCS_THREADS"] = "fixed"
    fixed = gcs.compare(paraphrases, settings=settings, model=model)
    assert threads_agree(model.model, len(fixed), 2, 1), "one thread computes other logits at the defaults"
    os.environ["GCS_THREADS"] = "auto"
    ran = alternating()
    switching = gcs.compare(paraphrases, settings=settings, model=model)
    assert {1, 2} <= set(ran) and len(ran) >= 12, f"the steps did not run on both counts: {ran}"
    assert switching["response"].tolist() == fixed["response"].tolist(), "the tokens changed with the threads"
    assert torch.get_num_threads() == 2, "the thread count did not come back"


def test_at_the_defaults_a_token_never_depends_on_the_threads_of_its_step():
    """The premise, on the embedded model at the default dtype: a decode step gives the same logits on one thread
    as on two (the probe), and every method's tokens are the same with the steps' threads switching at every step
    as on two threads throughout. The thread count comes back when the call ends."""
    in_a_fresh_process(premise_at_the_defaults)


def one_thread_with_other_logits_is_never_used():
    torch.set_num_threads(2)
    model = tiny_gcs_model()
    tilt = torch.linspace(0, 3, model.model.config.vocab_size)  # the distribution itself changes with the threads
    model.model.lm_head.register_forward_hook(lambda module, args, out: out + tilt * torch.get_num_threads())
    assert not threads_agree(model.model, 6, 2, 1), "the probe missed logits that depend on the threads"
    threads_seen = []
    ThreadChoice.observe = lambda self, seconds, cpu: threads_seen.append(torch.get_num_threads()) or 1  # 1, always
    adapted = gcs.compare(["w3 w4", "w5 w6 w7"], settings=gcs.SamplingSettings(max_new_tokens=12), model=model)
    assert threads_seen and set(threads_seen) == {2}, f"a step ran on one thread: {threads_seen}"
    os.environ["GCS_THREADS"] = "fixed"
    fixed = gcs.compare(["w3 w4", "w5 w6 w7"], settings=gcs.SamplingSettings(max_new_tokens=12), model=model)
    assert adapted["response"].tolist() == fixed["response"].tolist()


def test_where_one_thread_computes_other_logits_it_is_never_used():
    """A model whose logits depend on the thread count (a hook tilts them by it): the probe says so, every step
    stays on two threads however often one is asked for, and the tokens are those of a run that never switches."""
    in_a_fresh_process(one_thread_with_other_logits_is_never_used)


def thread_count_back_after_a_failure():
    torch.set_num_threads(2)
    ran = alternating()
    model = tiny_gcs_model()

    def fail_on_one_thread(module, args, out):
        if torch.get_num_threads() == 1 and len(ran) > 3:
            raise RuntimeError("a failure on one thread")
        return out

    model.model.lm_head.register_forward_hook(fail_on_one_thread)
    try:
        gcs.generate(["w3 w4"], method="gcswr", max_new_tokens=30, model=model, min_new_tokens=30)
    except RuntimeError as error:
        assert "a failure on one thread" in str(error)
    else:
        raise AssertionError("no step failed on one thread")
    assert 1 in ran and torch.get_num_threads() == 2, (ran, torch.get_num_threads())


def test_the_thread_count_comes_back_after_a_failed_step():
    in_a_fresh_process(thread_count_back_after_a_failure)


def a_thread_started_meanwhile_keeps_every_thread():
    torch.set_num_threads(2)
    internals.openmp_threads_setter()(1)  # this thread alone, as a step on one thread is
    seen = []
    other = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    other.start()
    other.join()
    assert torch.get_num_threads() == 1 and seen == [2], seen


def test_one_thread_for_a_generation_is_not_one_thread_for_threads_started_meanwhile():
    """``torch.set_num_threads`` also sets what threads read when they first use torch; the steps' setter sets the
    generating thread's count alone."""
    in_a_fresh_process(a_thread_started_meanwhile_keeps_every_thread)


def threads_in_this_process() -> int:
    return len(os.listdir("/proc/self/task"))


def until(condition, what: str) -> None:
    """Wait for ``condition()`` (OpenMP's workers end on their own schedule); fail after a minute without it."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def a_waiting_caller_lets_its_openmp_team_go():
    from gcs.runtime.background import Background

    torch.set_num_threads(2)
    torch.randn(4_000_000).exp_()  # a parallel region: this thread's OpenMP team gets a worker thread
    with_team = threads_in_this_process()
    internals.release_openmp_threads()
    until(lambda: threads_in_this_process() == with_team - 1, "the released worker thread never ended")
    torch.randn(4_000_000).exp_()  # the next region starts a team again
    assert threads_in_this_process() == with_team
    seen = []

    def work(stop):  # the caller's team went before this thread started: no more threads than with the team
        until(lambda: threads_in_this_process() == with_team, "the caller's OpenMP worker outlived its hand-off")
        seen.append(threads_in_this_process())
        torch.randn(4_000_000).exp_()  # and this thread's team works as usual

    Background(work, "gcs-test").result()
    assert seen == [with_team]


def needs_openmp_teams() -> None:
    runtime = internals.openmp_runtime()
    if (os.cpu_count() or 1) < 2 or runtime is None or "libgomp" not in runtime[0]:
        pytest.skip("needs torch on GNU OpenMP and 2 cores or more: the teams this test counts")


def test_a_thread_that_hands_model_work_to_another_lets_its_idle_openmp_team_go():
    """GNU OpenMP throttles the spinning of every team while it manages more threads than there are cores: a worker
    thread's generation ran 1.4x slower beside the idle team of the thread that loaded the model
    (docs/benchmarks.md). ``Background``'s caller lets its team go first."""
    needs_openmp_teams()
    in_a_fresh_process(a_waiting_caller_lets_its_openmp_team_go)


def pool_threads_let_their_openmp_teams_go():
    from concurrent.futures import ThreadPoolExecutor

    from gcs.runtime.background import releasing_openmp

    torch.set_num_threads(2)
    internals.release_openmp_threads()  # this thread's team (imports may have run a region): only the pool's counts

    def region(result=None):
        torch.randn(4_000_000).exp_()  # a parallel region: the calling thread's OpenMP team gets a worker thread
        return result

    def steps():
        yield region("first")
        yield region("second")

    with ThreadPoolExecutor(1) as pool:  # one long-lived request thread, as a web server's pool keeps
        pool.submit(lambda: None).result()
        alone = threads_in_this_process()  # this thread and the pool's, no team
        assert pool.submit(region).result() is None
        assert threads_in_this_process() == alone + 1, "the control: a plain call leaves its thread's worker behind"
        pool.submit(internals.release_openmp_threads).result()
        until(lambda: threads_in_this_process() == alone, "the released worker thread never ended")
        assert pool.submit(releasing_openmp(region), 7).result() == 7
        until(lambda: threads_in_this_process() == alone, "a releasing call left its thread's worker behind")
        answers = releasing_openmp(steps)()
        assert releasing_openmp(releasing_openmp(steps)).__wrapped__ is steps  # wrapped once, however often asked
        for expected in ("first", "second"):  # each step in the pool's thread, as Gradio runs a handler's steps
            assert pool.submit(next, answers).result() == expected
            until(lambda: threads_in_this_process() == alone, "a releasing generator's step left a worker behind")


def test_a_request_thread_lets_its_openmp_team_go_after_each_call_and_each_step():
    """A web server's request thread that ran torch keeps its idle team while it waits for the next request, and the
    generation beside it runs throttled (1.27x slower in-process, docs/benchmarks.md "Threads"):
    ``releasing_openmp`` lets the team go after a call and after each step of a generator."""
    needs_openmp_teams()
    in_a_fresh_process(pool_threads_let_their_openmp_teams_go)


def test_every_handler_of_the_app_that_runs_the_model_or_the_samplers_lets_its_openmp_team_go():
    """The app's model and coupling lanes run the model or the samplers in Gradio's request threads (the coupling
    explorer, filled as a page loads, left a team behind that slowed the visitor's next side by side)."""
    import ui

    demo = ui.build()
    lanes = [function for function in demo.fns.values() if function.concurrency_id in ("model", "coupling")]
    assert len(lanes) >= 10
    kept = [function.name for function in lanes if not getattr(function.fn, "releases_openmp", False)]
    assert not kept, f"these handlers keep their thread's OpenMP team: {kept}"
