"""``gcs vllm-serve``: the command it runs, and the real server (vLLM's CPU build, the embedded model) over HTTP
with the ``openai`` client and ``vllm_xargs``, as the README shows it."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import scipy.stats
from conftest import READY_LIMIT_S, free_port, running_server

from gcs.cli import main
from gcs.vllm_options import PLUGIN
from gcs.vllm_serve import vllm_serve_command

MODEL = "smollm2-135m-instruct"
QUESTIONS = ("What is DNA?", "Can you explain what DNA is?")


# -- the command ------------------------------------------------------------------------------------
def options(command: list[str]) -> list[str]:
    return command[3:]  # after python -m ENTRY


def test_cpu_defaults_and_the_plugin_once():
    installed = options(vllm_serve_command("some/model", cpu=True, registered=True))
    assert installed[:6] == ["--model", "some/model", "--host", "127.0.0.1", "--port", "8000"]
    assert "--logits-processors" not in installed  # the entry point loads it: once
    for option in ("--enforce-eager", "--max-model-len", "--kv-cache-memory-bytes", "--max-num-seqs"):
        assert option in installed
    assert installed[installed.index("--generation-config") + 1] == "vllm"  # no hidden penalties or temperature
    on_path = options(vllm_serve_command("some/model", cpu=False, registered=False))
    assert on_path[on_path.index("--logits-processors") + 1] == PLUGIN and "--enforce-eager" not in on_path


def test_what_follows_the_double_dash_wins():
    command = options(vllm_serve_command("m", cpu=True, registered=True,
                                         extra=["--max-model-len=2048", "--no-enforce-eager", "-tp", "2"]))
    assert "--max-model-len" not in command and "--enforce-eager" not in command
    assert command[-4:] == ["--max-model-len=2048", "--no-enforce-eager", "-tp", "2"]


@pytest.mark.parametrize("extra, message", [
    (["--logits-processors", PLUGIN], "drop --logits-processors"),
    (["--model", "x"], "first argument"),
])
def test_contradictions_are_refused_before_anything_starts(extra, message):
    with pytest.raises(ValueError, match=message):
        vllm_serve_command("m", extra=extra, cpu=True, registered=True)


def test_the_cli_says_what_is_wrong(capsys):
    assert main(["vllm-serve", "m", "--", "--logits-processors", PLUGIN]) == 2
    assert "gcs vllm-serve: error: gcs is installed" in capsys.readouterr().err


# -- the server -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``python -m gcs vllm-serve`` on a free port, once it lists its model."""
    port, log = free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    base = f"http://127.0.0.1:{port}/v1"
    with running_server([sys.executable, "-m", "gcs", "vllm-serve", "--port", str(port)], log, base + "/models",
                        {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}):
        yield openai.OpenAI(base_url=base, api_key="-", max_retries=0, timeout=READY_LIMIT_S), log


def ask(client, question: str, xargs: dict | None, tokens: int = 24, temperature: float = 1.0, **kwargs) -> list[str]:
    """The response's tokens (as the server names them)."""
    reply = client.chat.completions.create(
        model=MODEL, temperature=temperature, max_tokens=tokens, logprobs=True,
        messages=[{"role": "user", "content": question}],
        extra_body={"vllm_xargs": xargs} if xargs else {}, **kwargs)
    return [token.token for token in reply.choices[0].logprobs.content]


def shared_prefix(a: list[str], b: list[str]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_the_server_lists_the_embedded_model_under_its_name(server):
    client, _ = server
    assert [model.id for model in client.models.list()] == [MODEL]


def test_same_seed_gcswr_answers_to_two_paraphrases_share_longer_starts_than_is(server):
    """16 seeds, each a pair of requests per method (sent together, as a class's clients would): GCSwR's pair
    shares a longer start than IS's in significantly many seeds (one-sided sign test over untied seeds)."""
    client, _ = server

    def pair(method_seed):
        method, seed = method_seed
        return shared_prefix(*(ask(client, q, {"gcs_method": method, "gcs_seed": seed}) for q in QUESTIONS))

    with ThreadPoolExecutor(8) as pool:
        shared = {m: list(pool.map(pair, [(m, s) for s in range(16)])) for m in ("is", "gcswr")}
    wins = sum(g > i for g, i in zip(shared["gcswr"], shared["is"]))
    losses = sum(g < i for g, i in zip(shared["gcswr"], shared["is"]))
    p = scipy.stats.binomtest(wins, wins + losses, alternative="greater").pvalue
    assert p < 1e-3, shared  # measured: 15 of 15 untied seeds (IS shares 1-2 tokens, GCSwR 1-24)


def test_a_request_alone_gets_the_same_answer_every_time_streamed_or_not(server):
    client, _ = server
    xargs = {"gcs_method": "gcswr", "gcs_seed": 11}
    request = {"model": MODEL, "temperature": 1.0, "max_tokens": 24, "extra_body": {"vllm_xargs": xargs},
               "messages": [{"role": "user", "content": QUESTIONS[0]}]}
    first = client.chat.completions.create(**request).choices[0].message.content
    assert client.chat.completions.create(**request).choices[0].message.content == first
    chunks = client.chat.completions.create(**request, stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == first
    request["extra_body"] = {"vllm_xargs": {**xargs, "gcs_seed": 12}}
    assert client.chat.completions.create(**request).choices[0].message.content != first  # another seed, another draw


def test_plain_requests_are_untouched_and_greedy_gcs_is_greedy(server):
    client, _ = server
    greedy = ask(client, QUESTIONS[0], None, temperature=0.0)
    assert ask(client, QUESTIONS[0], {"gcs_method": "gcs", "gcs_seed": 3}, temperature=0.0) == greedy
    assert len(ask(client, QUESTIONS[1], None)) == 24  # a plain sampled request is served as before


@pytest.mark.parametrize("xargs, kwargs, message", [
    ({"gcs_method": "gumbel"}, {}, "unknown method"),
    ({"gcs_method": "gcs", "gcs_seed": -1}, {}, "gcs_seed"),
    ({"gcs_method": "gcswr", "gcs_stream": 3}, {}, "applies to IS only"),
    ({"gcs_method": "gcs", "gcs_temperature": 2}, {}, "unknown gcs argument"),
    ({"gcs_seed": 3}, {}, "gcs_method is required"),
    ({"gcs_method": "gcs"}, {"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"gcs_method": "gcswr"}, {"n": 2}, "one request per gcs_seed"),
])
def test_each_bad_argument_is_a_400_and_the_server_keeps_serving(server, xargs, kwargs, message):
    client, _ = server
    with pytest.raises(openai.BadRequestError, match=message):
        ask(client, QUESTIONS[0], xargs, tokens=4, **kwargs)
    assert len(ask(client, QUESTIONS[0], {"gcs_method": "gcswr", "gcs_seed": 0}, tokens=4)) == 4


@pytest.mark.parametrize("xargs, message", [
    ({"gcs_method": "gcswr", "gcs_seed": True}, "gcs_seed must not be true or false"),
    ({"gcs_method": "is", "gcs_stream": False}, "gcs_stream must not be true or false"),
])
def test_a_boolean_gcs_argument_is_refused(server, xargs, message):
    """vLLM's request model reads ``"gcs_seed": true`` as 1: it ran as seed 1, where the app refuses booleans."""
    client, _ = server
    with pytest.raises(openai.BadRequestError, match=message):
        ask(client, QUESTIONS[0], xargs, tokens=4)
    assert len(ask(client, QUESTIONS[0], {"gcs_method": "gcswr", "gcs_seed": 1}, tokens=4)) == 4


def test_a_megabyte_argument_is_not_echoed_back(server):
    """A 1 MB ``gcs_method`` came back whole in a 1,000,122-byte 400."""
    client, _ = server
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, QUESTIONS[0], {"gcs_method": "m" * 1_000_000}, tokens=4)
    assert "unknown method 'mmm" in str(caught.value) and len(str(caught.value)) < 2_000
