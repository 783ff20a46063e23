"""Paraphrase sets: groups of rewordings of one question, from JSONL or CSV.

    >>> groups = parse_groups('{"id": "dna", "prompts": ["What is DNA?", "Explain DNA."]}', "jsonl")
    >>> groups[0]
    Group(id='dna', prompts=('What is DNA?', 'Explain DNA.'))

Schema. **JSONL**: one JSON object per line (blank lines are skipped) with

- ``"id"`` (string, unique): names the group in results;
- ``"prompts"``: a list of one or more non-blank strings, rewordings of one question;
  ``"prompt"`` (a single string) may stand in for a one-question group (the style sets).

**CSV**: a header with columns ``id`` and ``prompt``, one prompt per row; rows sharing
an ``id`` form a group, in file order. Other columns are ignored in both formats.

Built-in sets (``assets/``, written for this project): ``"general"`` (Alpaca-like
questions, three or more rewordings each), ``"coding"`` (language-agnostic coding
questions) and ``"lists"`` ("name five X" questions), the last two for style experiments.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gcs.runtime.arguments import ArgumentTypeError, check_prompts
from gcs.runtime.quoting import quoted

MAX_DATA_BYTES = 5_000_000
MAX_PROMPT_CHARS = 8_000
BUILTIN_SETS = {"general": "paraphrases.jsonl", "coding": "coding.jsonl", "lists": "lists.jsonl"}


@dataclass(frozen=True)
class Group:
    """Rewordings of one question.

    Attributes:
        id: the group's name.
        prompts: the rewordings.
    """

    id: str
    prompts: tuple[str, ...]


def _assets_dirs() -> list[Path]:
    # A source checkout keeps assets/ next to gcs/; `pip install .` copies them to <prefix>/share/gcs.
    return [Path(__file__).resolve().parents[2] / "assets", Path(sys.prefix) / "share" / "gcs" / "assets"]


def builtin_path(name: str) -> Path:
    """The file of a built-in set ("general", "coding" or "lists")."""
    if name not in BUILTIN_SETS:
        raise ValueError(f"unknown built-in set {quoted(name)}: expected one of {', '.join(BUILTIN_SETS)}")
    for folder in _assets_dirs():
        if (folder / BUILTIN_SETS[name]).is_file():
            return folder / BUILTIN_SETS[name]
    raise ValueError(f"the built-in set {quoted(name)} ({BUILTIN_SETS[name]}) is not installed; pass a file path "
                     "instead")


def _check_prompt(value, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: a prompt must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{where}: a prompt is blank")
    if len(value) > MAX_PROMPT_CHARS:
        raise ValueError(f"{where}: a prompt has {len(value):,} characters (at most {MAX_PROMPT_CHARS:,})")
    return value.strip()


def _jsonl_groups(text: str) -> list[Group]:
    groups = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not valid JSON ({error.msg})") from None
        except RecursionError:
            raise ValueError(f"{where}: JSON nested too deeply") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a JSON object with 'id' and 'prompts'")
        if "id" not in record:
            raise ValueError(f"{where}: missing 'id'")
        if "prompts" in record:
            prompts = record["prompts"]
            if not isinstance(prompts, list):
                raise ValueError(f"{where}: 'prompts' must be a list of strings")
        elif "prompt" in record:
            prompts = [record["prompt"]]
        else:
            raise ValueError(f"{where}: missing 'prompts' (a list of rewordings) or 'prompt'")
        if not prompts:
            raise ValueError(f"{where}: group {quoted(record['id'])} has no prompts")
        groups.append(Group(str(record["id"]), tuple(_check_prompt(p, where) for p in prompts)))
    return groups


def _csv_groups(text: str) -> list[Group]:
    reader = csv.DictReader(io.StringIO(text))
    missing = {"id", "prompt"} - set(reader.fieldnames or [])
    if missing:
        raise ValueError(f"CSV is missing column(s) {', '.join(sorted(missing))}: expected a header with id,prompt")
    prompts: dict[str, list[str]] = {}
    for number, row in enumerate(reader, start=2):
        if row["id"] is None or row["prompt"] is None:
            raise ValueError(f"line {number}: expected values for id and prompt")
        if not row["id"].strip():
            raise ValueError(f"line {number}: empty id")
        prompts.setdefault(row["id"].strip(), []).append(_check_prompt(row["prompt"], f"line {number}"))
    return [Group(group_id, tuple(texts)) for group_id, texts in prompts.items()]


def parse_groups(text: str, fmt: str) -> list[Group]:
    """Paraphrase groups from the text of a "jsonl" or "csv" file.

    Args:
        text: the file's text: JSON lines ``{"id": ..., "prompts": [...]}`` (or ``"prompt"``), or CSV with a header
            ``id,prompt`` and one row per prompt.
        fmt: "jsonl" or "csv".

    Returns:
        The groups, in file order.

    Raises:
        ArgumentTypeError: an argument of the wrong type.
        ValueError: malformed text, naming the line and the problem.

    Examples:
        >>> parse_groups('{"id": "dna", "prompts": ["What is DNA?", "Explain what DNA is."]}', "jsonl")
        [Group(id='dna', prompts=('What is DNA?', 'Explain what DNA is.'))]
        >>> parse_groups("id,prompt\\ndna,What is DNA?\\ndna,Explain what DNA is.\\n", "csv")[0].prompts
        ('What is DNA?', 'Explain what DNA is.')
    """
    if not isinstance(text, str):
        raise ArgumentTypeError(f"text must be the text of a data file (a string), got {type(text).__name__}")
    if not isinstance(fmt, str):
        raise ArgumentTypeError(f"fmt must be jsonl or csv, got {type(fmt).__name__} {quoted(fmt)}")
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"fmt: unknown data format {quoted(fmt)}: expected jsonl or csv")
    if "\x00" in text:
        raise ValueError("the data file looks binary (it contains NUL bytes), expected UTF-8 text")
    groups = _jsonl_groups(text) if fmt == "jsonl" else _csv_groups(text)
    if not groups:
        raise ValueError("the data file has no groups")
    seen = set()
    for group in groups:
        if group.id in seen:
            raise ValueError(f"group id {quoted(group.id)} appears twice")
        seen.add(group.id)
    return groups


def load_groups(source: str | Path) -> list[Group]:
    """Paraphrase groups from a built-in set or a file.

    Args:
        source: a built-in set's name ("general", "coding", "lists") or the path of a ``.jsonl`` / ``.csv`` file (at
            most 5 MB).

    Returns:
        The groups.

    Raises:
        ValueError: an unknown set, a missing, oversized or malformed file.

    Examples:
        >>> groups = load_groups("general")
        >>> len(groups), groups[0].id
        (44, 'dna')
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentTypeError(f"source must be a built-in set name or a data file's path, got "
                                f"{type(source).__name__} {quoted(source)}")
    if isinstance(source, str) and source in BUILTIN_SETS:
        source = builtin_path(source)
    path = Path(source)
    try:
        found = path.is_file()
    except OSError:  # a name past the file system's limit (ENAMETOOLONG) names no file either
        found = False
    if not found:
        raise ValueError(f"source: data file {quoted(str(path))} does not exist (or name a built-in set: "
                         f"{', '.join(BUILTIN_SETS)})")
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"data file {quoted(path.name)} must end in .jsonl or .csv")
    size = path.stat().st_size
    if size > MAX_DATA_BYTES:
        raise ValueError(f"data file {quoted(path.name)} is {size:,} bytes; the limit is {MAX_DATA_BYTES:,}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"data file {quoted(path.name)} is not UTF-8 text") from None
    try:
        return parse_groups(text, fmt)
    except ValueError as error:
        raise ValueError(f"{path.name}: {error}") from None


def as_groups(groups: Sequence[Group] | Sequence[Sequence[str]], min_size: int = 1) -> list[Group]:
    """Accept ``Group`` objects or plain lists of prompts (named "0", "1", ...)."""
    if isinstance(groups, (str, Group)) or not isinstance(groups, Sequence):
        raise ArgumentTypeError(f"groups must be a non-empty list of groups of prompts, got {type(groups).__name__}")
    if not groups:
        raise ValueError("groups must be a non-empty list of groups of prompts")
    result = []
    for i, group in enumerate(groups):
        if not isinstance(group, Group):
            if isinstance(group, str) or not isinstance(group, Sequence):
                raise ArgumentTypeError(f"groups[{i}] must be a list of prompts, got {type(group).__name__}")
            group = Group(str(i), tuple(group))
        if len(group.prompts) < min_size:
            raise ValueError(f"group {quoted(group.id)} has {len(group.prompts)} prompt(s); this needs at least "
                             f"{min_size}")
        check_prompts(group.prompts, f"group {quoted(group.id)} prompts")
        result.append(group)
    if len({g.id for g in result}) != len(result):
        raise ValueError("group ids must be unique")
    return result
