"""The command line explains itself: every argument of every subcommand (and of ``gcs vllm-serve``) has help
text, and ``python -m gcs --help`` lists every subcommand. The walk is shown finding a planted flag without help."""

from __future__ import annotations

import argparse

import pytest

from gcs.cli import commands as cli


def undocumented(parser: argparse.ArgumentParser, path: str = "gcs") -> list[str]:
    """Every argument of ``parser`` and of its subcommands, recursively, whose help is empty or suppressed."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += undocumented(sub, f"{path} {name}")
            found += [f"{path} {c.dest}" for c in action._choices_actions if not c.help]
        elif not action.help or action.help == argparse.SUPPRESS:
            found.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return found


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices]


def test_the_walk_finds_a_flag_without_help():
    parser = argparse.ArgumentParser(prog="planted")
    sub = parser.add_subparsers().add_parser("sub", help="a subcommand")
    sub.add_argument("--documented", help="says what it does")
    sub.add_argument("--bare")
    assert undocumented(parser) == ["gcs sub --bare"]


@pytest.mark.parametrize("parser", [cli.build_parser(), cli.serve_parser()], ids=["gcs", "gcs vllm-serve"])
def test_every_argument_of_every_subcommand_has_help(parser):
    assert not undocumented(parser), f"arguments without help text: {undocumented(parser)}"


def test_gcs_help_lists_every_subcommand(capsys):
    names = subcommands(cli.build_parser())
    assert {"run", "style", "ab", "compare", "vllm-serve"} <= set(names)
    with pytest.raises(SystemExit) as exit:
        cli.main(["--help"])  # what ``python -m gcs --help`` runs (gcs/__main__.py)
    assert exit.value.code == 0
    shown = capsys.readouterr().out
    missing = [name for name in names if f"\n    {name} " not in shown]
    assert not missing, f"subcommands that --help does not list: {missing}\n{shown}"
