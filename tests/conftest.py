"""Shared fixtures and statistical helpers (the session-wide rules: the root conftest.py).

Statistical tests use fixed seeds, so each is deterministic; thresholds are the usual
p > 1e-3 (chi-square) or |z| < 4.5 (normal approximation), chosen before running.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import runpy
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from keyed_server import APP_FILES, SHARED, SharedServer
from scipy import stats
from servers import free_port, running_server  # noqa: F401 - (the tests import them from here too)
from waiting import Progress, app_client, served

import gcs

P_VALUE_THRESHOLD = 1e-3
Z_THRESHOLD = 4.5


def chi_square_p(counts, probabilities) -> float:
    """p-value of observed ``counts`` against ``probabilities`` (cells with zero probability must be empty)."""
    counts = np.asarray(counts, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    assert counts[probabilities == 0].sum() == 0, "a zero-probability category was drawn"
    live = probabilities > 0
    expected = probabilities[live] / probabilities[live].sum() * counts.sum()
    assert expected.min() >= 5, "test design error: expected counts below 5"
    return stats.chisquare(counts[live], expected).pvalue


def z_score(successes: int, trials: int, probability: float) -> float:
    """Normal-approximation z of a binomial count against its expected probability."""
    return (successes - trials * probability) / np.sqrt(trials * probability * (1 - probability))


def sequence_probability(sequence, model, vocab: int) -> float:
    """The exact probability that a synthetic LM ``model(history [rows, length], vocab) -> logits`` writes
    ``sequence``: the product of its softmax's entries along the way."""
    probability, history = 1.0, torch.zeros(1, 0, dtype=torch.long)
    for token in sequence:
        probability *= torch.softmax(model(history, vocab).double(), dim=-1)[0, token].item()
        history = torch.cat([history, torch.tensor([[token]])], dim=1)
    return probability


def all_sequences(vocab: int, length: int):
    """All sequences in the order of their base-``vocab`` code (first token least significant)."""
    for code in range(vocab**length):
        yield [(code // vocab**i) % vocab for i in range(length)]


def tiny_llama(vocab_size: int = 64, seed: int = 0, **overrides):
    """A randomly initialised two-layer Llama built from a config (no download)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        **overrides,
    )
    return LlamaForCausalLM(config).eval()


def tiny_gcs_model(vocab_size: int = 64, seed: int = 0, **generation_defaults):
    """A ``gcs.Model`` of ``tiny_llama`` with a word-level tokenizer (words w3..w63) built here, no download.

    ``generation_defaults`` go into the model's ``generation_config``, as a checkpoint's would.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w3"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", bos_token="<s>")
    model = tiny_llama(vocab_size, seed)
    for name, value in generation_defaults.items():
        setattr(model.generation_config, name, value)
    return gcs.Model(name=f"tiny-{seed}", model=model, tokenizer=tokenizer)


def require_fused_kernel():
    """Fail, naming the reason, when the fused GCSwR kernel cannot be built here; skip (reason
    shown) only when GCS_CPU_KERNEL=off was set on purpose."""
    if gcs.sampling.kernels.kernel_mode() == "off":
        pytest.skip(f"{gcs.sampling.kernels.KERNEL_ENV}=off: the fused GCSwR kernel is switched off for this run")
    assert gcs.sampling.kernels.cpu_kernel() is not None, gcs.sampling.kernels.kernel_status()


@pytest.fixture(scope="session")
def tiny_model():
    return tiny_llama()


@pytest.fixture(scope="module")
def embedded_model():
    """The real embedded SmolLM2-135M-Instruct (converted once into the user cache, then about 0.5 s) at the default
    dtype users get (bf16 on CPUs with hardware bf16, else fp32): the promises (same seed, same answer;
    hindsight replays) are tested where users meet them. One per module, the one ``gcs.load_model()`` keeps: gcs's
    caches are emptied when a module ends (``memory_released``), and a model kept for the session would then be a
    second copy beside the one gcs loads again."""
    return gcs.load_model()


try:
    LIBC = ctypes.CDLL("libc.so.6")  # glibc's malloc_trim, where there is one
except OSError:
    LIBC = None


def released_to_the_system() -> None:
    """The memory glibc keeps for later allocations given back to the system (``malloc_trim``, a few ms; where there
    is glibc), once what held it is collected. Measured after an in-process vLLM engine was shut down and collected:
    1.68 -> 1.30 GiB resident."""
    if hasattr(LIBC, "malloc_trim"):
        LIBC.malloc_trim(0)


@pytest.fixture(autouse=True, scope="module")
def memory_released(request):
    """What a module loaded is let go when it ends. Its in-process vLLM engines are shut down
    (``gcs.engines.vllm.close_engines``; a busy one stays): a worker used to keep each to its own end, weights and a
    2 GiB KV cache apiece (two after tests/test_vllm.py, whose fp32 test has its own), beside the app and servers of
    the files after it; the next module that needs one starts it again (a few tests of tests/test_vllm.py,
    test_bench.py and test_endpoints.py). The models and embedders gcs keeps for the next call (up to four of each)
    are dropped too, with the rest (``gcs.close``): a later file that needs one loads it again (0.5-2 s). And glibc
    gives back the memory it kept for later (``malloc_trim``, a few ms). Measured on tests/test_vllm.py: the worker
    held 7.5 GiB after it, now 2.1 GiB; after five light files (test_faults, test_cli, test_ab, test_counterfactual,
    test_e5, ``-n 0``) 1.83 GiB instead of 2.66 with gcs's caches kept (docs/testing.md).

    A module that started one is in a ``MEMORY_HEAVY`` scope (the root conftest.py), or its last test errs at
    teardown: the scheduler keeps heavy files apart by that list, so a file that starts an engine unlisted can run
    beside one (tests/test_lanes.py, test_bad_input.py, test_csv_injection.py and test_markup_escaping.py did, through
    the page's default engine: ``transformers_engine``)."""
    engines = sys.modules.get("gcs.engines.vllm")
    kept = set(engines._ENGINES) if engines is not None else set()  # (a busy engine an earlier module left)
    yield
    engines = sys.modules.get("gcs.engines.vllm")  # (never import vLLM to close nothing)
    started = engines is not None and bool(set(engines._ENGINES) - kept)
    if any(name in sys.modules for name in ("gcs.engines.models", "gcs.scoring.metrics", "gcs.engines.vllm")):
        gcs.close()  # (only where gcs loaded something: it imports what it empties; its gc.collect frees engines)
    released_to_the_system()
    scheduling = request.config.pluginmanager.get_plugin(str(ROOT / "conftest.py"))
    path = request.node.path.relative_to(ROOT).as_posix()
    if started and scheduling is not None and path.startswith("tests/") and not scheduling.memory_heavy(path):
        pytest.fail(f"{path} started an in-process vLLM engine (gigabytes) but is not MEMORY_HEAVY (the root "
                    "conftest.py), so it may run beside a heavy file: list it there, or generate with transformers "
                    "where the engine is not what it tests (the transformers_engine fixture)", pytrace=False)


@pytest.fixture
def transformers_engine(monkeypatch):
    """The app's tabs, called in this process, generate with transformers, as ``app_server``'s app does: where vLLM
    is installed the page's default engine is an in-process vLLM engine, and a file whose tests are about the page
    (its checks, escaping, lanes, downloads, faults injected into the transformers model) started one for its few
    generating calls: about 10 s and 3 GiB of the worker's memory apiece (tests/test_bad_input.py alone: 2.3 ->
    5.2 GiB). The page on vLLM is tests/test_bench.py's (the /compare profile on the vLLM engine). A file asks for it
    with ``pytestmark = pytest.mark.usefixtures("transformers_engine")``."""
    from ui.shared import deployment

    monkeypatch.setattr(deployment.ENGINE, "name", "transformers")


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    """The keyed ``gcs vllm-serve`` that tests/test_endpoints.py and test_vllm_serve.py share (``keyed_server``): the
    call that waits until it serves, giving (its URL, its process, its progress). Started now, in a thread."""
    return SHARED.waiting(tmp_path_factory)


@pytest.hookimpl(trylast=True)  # (after the runner's own teardown: the module's fixtures that use it are gone)
def pytest_runtest_teardown(item, nextitem):
    """A shared server (the keyed one, the app) stops once the next test is in no file that shares it (or none is
    next)."""
    for shared in SHARED_SERVERS:
        if shared.running and (nextitem is None or nextitem.path.name not in shared.files):
            shared.close()


def pytest_sessionfinish(session):
    for shared in SHARED_SERVERS:
        shared.close()  # (a run stopped early: -x, a Ctrl-C)


RECYCLED_WIN_SEEDS = 16


def first_recycled_win(trace_of, row: int = 1):
    """(seed, trace, win): the first seed whose trace (``trace_of(seed)``) has a race of ``row`` that a recycled clock
    wins (``gcs.carried_win``), that trace, and its first such race by position. Which seed and race those are
    depends on the machine's kernels, as the tokens do: tests find them instead of naming a token. Seed 0 has one
    on the machines measured; over 16 seeds none having one would fail here, naming what was searched."""
    for seed in range(RECYCLED_WIN_SEEDS):
        trace = trace_of(seed)
        for position in range(1, len(trace.steps)):
            win = gcs.carried_win(trace, position, row)
            if win is not None:
                return seed, trace, win
    raise AssertionError(f"no race of row {row} won by a recycled clock in seeds 0 to {RECYCLED_WIN_SEEDS - 1}")


ROOT = Path(__file__).resolve().parent.parent


def check_space_module():
    """scripts/check_space.py as a module (a script, not a package): the Space's check, and the browser step the
    Docker check shares with it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_space", ROOT / "scripts" / "check_space.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def client(app_url, app_progress):
    """A gradio_client for the running app (as users call its API), waiting on the app's progress, not on a timeout
    (``waiting.app_client``)."""
    return app_client(app_url, app_progress)


def log_count(app_log: Path, text: str) -> int:
    return app_log.read_text().count(text)


def queued_call(app_url: str, fn_index: int, data: list, progress: Progress) -> dict:
    """A raw queue/join call and its final message (as the page sends it)."""
    session = f"queued-call-{time.monotonic_ns()}"
    joined = served("POST", f"{app_url}gradio_api/queue/join", progress,
                    json={"data": data, "fn_index": fn_index, "session_hash": session})
    assert joined.status_code == 200, joined.text[:300]
    answer = served("GET", f"{app_url}gradio_api/queue/data", progress, params={"session_hash": session}).text
    for line in answer.splitlines():  # (the stream closes after the session's last event)
        if line.startswith("data:") and '"process_completed"' in line:
            return json.loads(line.removeprefix("data:"))
    raise AssertionError("the stream ended without a result")


def call_outcome(url: str, progress, *arguments, **options) -> str:
    """One client's ``predict`` in a burst against a bounded queue: "served", "queue full" or "other: <error>"."""
    try:
        app_client(url, progress).predict(*arguments, **options)
        return "served"
    except Exception as error:
        return "queue full" if "queue is full" in str(error).lower() else f"other: {error}"


def error_text(call) -> str:
    """The text of the error that ``call()`` raises (a test fails if it raises none)."""
    with pytest.raises(Exception) as caught:
        call()
    return str(caught.value)


@pytest.fixture(scope="module")
def app_url(app_server):
    return app_server[0]


@pytest.fixture(scope="module")
def app_log(app_server) -> Path:
    """The running app's log file (stdout and stderr)."""
    return app_server[1]


@pytest.fixture(scope="module")
def app_progress(app_server) -> Progress:
    """Whether the running app still works (``waiting.Progress``): what every wait on it checks."""
    return app_server[2]


@contextlib.contextmanager
def running_app(tmp_path_factory):
    """(url, log path, progress) of the app in its own process on a free port, once it serves; stopped (never
    leaked). Fails only when the process exits, stops working or logs a traceback; how long start-up takes is
    ``bench/bench_app.py``'s business, not a test's."""
    port = free_port()
    log = tmp_path_factory.mktemp("app") / "app.log"
    # transformers: the app's tests are about the app; its vLLM path runs in-process (tests/test_bench.py's profile of
    # /compare on vLLM, tests/test_faults.py's fallback), beside the suite's one vLLM engine
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "GCS_QUEUE_SIZE": "4",
           "GCS_ENGINE": "transformers"}
    url = f"http://127.0.0.1:{port}/"
    with running_server([sys.executable, "app.py"], log, url, env,
                        fail_on="Traceback (most recent call last)") as (_, progress):
        yield url, log, progress


APP = SharedServer(running_app, APP_FILES)
SHARED_SERVERS = (SHARED, APP)


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    """(url, log path, progress) of the app that the files of ``APP_FILES`` share (tests/keyed_server.py): started by
    the first test that asks, stopped once the next test is in none of them (``pytest_runtest_teardown``)."""
    return APP.waiting(tmp_path_factory)()


def refused_in_ui(updates, message: str) -> None:
    """A UI handler's answer to an error: its last update keeps every output but the status, which says the run
    failed with ``message``; ``updates`` is a callable returning the handler's updates (a toast carries the
    message: outside a request it is a UserWarning). A positional update keeps an output with ``gr.skip()``; an
    update by name (``ui.shared.messages.by_name``) by leaving it out: it holds the status alone."""
    import re

    import gradio as gr

    with pytest.warns(UserWarning, match=re.escape(message)):
        answers = updates()
    answer = answers[-1] if isinstance(answers, list) else answers
    if isinstance(answer, dict):  # an update by name: nothing but the status
        assert set(answer) == {"status"}, f"an error must not wipe earlier results: {sorted(answer)}"
        answer = (answer["status"],)
    *kept, status = answer
    shown = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", status)  # the status as Markdown shows it (escapes undone)
    assert status.startswith("**Failed:**") and message in shown, status
    assert all(output == gr.skip() for output in kept), "an error must not wipe earlier results"


def run_script(monkeypatch, script: Path, *arguments: str) -> tuple[int, str, str]:
    """``python SCRIPT ARGUMENTS`` in this process (a model loaded once serves every script of the suite): (exit
    status, stdout, stderr). ``sys.argv`` is put back by ``monkeypatch``."""
    monkeypatch.setattr(sys, "argv", [str(script), *arguments])
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
    return code, out.getvalue(), err.getvalue()
