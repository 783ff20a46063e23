"""Paraphrase sets: the built-in assets and loading users' JSONL / CSV files."""

import json

import pytest

import gcs
from gcs.experiments import data


def test_builtin_sets_have_the_promised_sizes():
    general = gcs.load_groups("general")
    assert len(general) >= 40 and all(len(g.prompts) >= 3 for g in general)
    assert len(gcs.load_groups("coding")) >= 15 and len(gcs.load_groups("lists")) >= 15
    for name in data.BUILTIN_SETS:
        groups = gcs.load_groups(name)
        assert len({g.id for g in groups}) == len(groups)
        assert len({p for g in groups for p in g.prompts}) == sum(len(g.prompts) for g in groups)


def test_jsonl_and_csv_give_the_same_groups(tmp_path):
    jsonl = tmp_path / "set.jsonl"
    jsonl.write_text('{"id": "a", "prompts": ["One?", "Uno?"]}\n\n{"id": "b", "prompt": "Two?", "note": "x"}\n')
    csv = tmp_path / "set.csv"
    csv.write_text('id,prompt,extra\na,One?,1\nb,Two?,2\na,"Uno?",3\n')
    expected = [gcs.Group("a", ("One?", "Uno?")), gcs.Group("b", ("Two?",))]
    assert gcs.load_groups(jsonl) == expected
    assert gcs.load_groups(str(csv)) == expected


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("bad.jsonl", '{"id": "a", "prompts": ["x"]}\n{"id": "b", "prompts": [\n', "line 2: not valid JSON"),
        ("list.jsonl", '["a", "b"]\n', "line 1: expected a JSON object"),
        ("noid.jsonl", '{"prompts": ["x"]}\n', "line 1: missing 'id'"),
        ("noprompts.jsonl", '{"id": "a"}\n', "missing 'prompts'"),
        ("emptygroup.jsonl", '{"id": "a", "prompts": []}\n', "group 'a' has no prompts"),
        ("blank.jsonl", '{"id": "a", "prompts": ["ok", "  "]}\n', "line 1: a prompt is blank"),
        ("number.jsonl", '{"id": "a", "prompts": [3]}\n', "must be a string"),
        ("dup.jsonl", '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "appears twice"),
        ("empty.jsonl", "", "no groups"),
        ("columns.csv", "group,text\na,x\n", "missing column"),
        ("header.csv", "", "missing column"),
        ("blankid.csv", "id,prompt\n ,x\n", "line 2: empty id"),
        ("data.txt", "hello", "must end in .jsonl or .csv"),
    ],
)
def test_bad_data_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        gcs.load_groups(path)


def test_binary_huge_and_missing_files(tmp_path):
    binary = tmp_path / "blob.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match="not UTF-8|binary"):
        gcs.load_groups(binary)
    nul = tmp_path / "nul.csv"
    nul.write_bytes(b"id,prompt\na,x\x00y\n")
    with pytest.raises(ValueError, match="binary"):
        gcs.load_groups(nul)
    huge = tmp_path / "huge.jsonl"
    huge.write_text(json.dumps({"id": "a", "prompt": "x"}) + "\n" + " " * data.MAX_DATA_BYTES)
    with pytest.raises(ValueError, match="the limit is"):
        gcs.load_groups(huge)
    with pytest.raises(ValueError, match="does not exist"):
        gcs.load_groups(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="characters"):
        gcs.parse_groups(json.dumps({"id": "a", "prompt": "x" * 20_000}), "jsonl")
