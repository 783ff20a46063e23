"""``gcs.compare`` and every entry point that checks its keywords is reached through a front (gcs/fronts.py) that
refuses an unknown keyword before the entry point's module (torch, transformers, pandas) is imported: the same
message, the same signature and docstring, and the entry point's own behaviour for everything else."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import gcs
from gcs.fronts import SourceText, front, source_signature
from gcs.runtime.keywords import keywords_checked

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["What is DNA?", "Explain what DNA is."]


def real(name: str):
    return getattr(importlib.import_module(f"gcs.{gcs._MODULE_OF[name]}"), name)


def checks_its_keywords(function) -> bool:
    """Whether ``function`` refuses an unknown keyword by name: wrapped by ``keywords_checked``, or passing its extra
    keywords to ``check_generate_kwargs``."""
    return function.__code__.co_qualname.startswith(keywords_checked.__name__ + ".") \
        or "check_generate_kwargs(" in inspect.getsource(inspect.unwrap(function))


def test_every_entry_point_that_checks_its_keywords_has_a_front():
    """A new entry point with ``**generate_kwargs`` or ``@keywords_checked`` would otherwise check its keywords only
    after its module's imports (10 s on a loaded machine)."""
    checking = {name for name in gcs.__all__ if inspect.isfunction(real(name)) and checks_its_keywords(real(name))}
    assert checking == gcs._FRONTED


@pytest.mark.parametrize("name", sorted(gcs._FRONTED))
def test_a_front_shows_its_entry_points_signature_and_docstring(name):
    """What help(), inspect and a web framework read: the entry point's names, kinds, defaults (a literal as its value,
    a name such as ``METHODS`` as written), annotations (as strings, as its module keeps them) and docstring."""
    shown, function = getattr(gcs, name), real(name)
    assert shown is not function and shown.__name__ == name and shown.__module__ == "gcs"
    assert shown.__doc__ == function.__doc__
    assert shown.__annotations__ == function.__annotations__
    ours, theirs = inspect.signature(shown).parameters, inspect.signature(function).parameters
    assert [(p.name, p.kind) for p in ours.values()] == [(p.name, p.kind) for p in theirs.values()]
    for parameter in ours.values():
        if isinstance(parameter.default, SourceText):
            assert isinstance(ast.parse(parameter.default.text, mode="eval").body, (ast.Name, ast.Attribute, ast.Call))
        else:
            assert parameter.default == theirs[parameter.name].default, parameter


@pytest.mark.parametrize("name", sorted(gcs._FRONTED))
def test_a_front_pickles_as_itself(name):
    """A function pickles by its module and name: gcs.NAME, this front (a process pool can be handed one)."""
    assert pickle.loads(pickle.dumps(getattr(gcs, name))) is getattr(gcs, name)


@pytest.mark.parametrize("call, keyword", [
    (lambda function, **k: function(PROMPTS, **k), "temprature"),
    (lambda function, **k: function(PROMPTS, **k), "max_tokens"),
    (lambda function, **k: function(PROMPTS, **k), "temperature_schedule"),
])
def test_a_front_refuses_with_its_entry_points_own_message(call, keyword):
    for name in ("compare", "generate"):
        with pytest.raises(TypeError) as by_front:
            call(getattr(gcs, name), **{keyword: 1})
        with pytest.raises(TypeError) as by_function:
            call(real(name), **{keyword: 1})
        assert str(by_front.value) == str(by_function.value)


def test_a_sampling_setting_among_the_extra_keywords_gets_the_entry_points_reason():
    with pytest.raises(TypeError) as by_front:
        gcs.sweep([PROMPTS], temperature=0.5)
    with pytest.raises(TypeError) as by_function:
        real("sweep")([PROMPTS], temperature=0.5)
    assert str(by_front.value) == str(by_function.value)
    assert str(by_front.value).endswith("'temperature' is one of gcs's sampling settings, which gcs.sweep does not "
                                        "take (its extra keywords go to transformers' generate)")


def test_a_known_keyword_reaches_the_entry_point_itself():
    """The front checks names only: the value is the entry point's to refuse, with its own message."""
    with pytest.raises(ValueError, match="seeds") as by_front:
        gcs.compare(PROMPTS, seeds=-1)
    with pytest.raises(ValueError) as by_function:
        real("compare")(PROMPTS, seeds=-1)
    assert str(by_front.value) == str(by_function.value)


def test_a_front_of_a_missing_function_or_unknown_extra_keywords_is_refused(tmp_path, monkeypatch):
    (tmp_path / "front_target.py").write_text("def takes_any(x, **options):\n    return options\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AttributeError, match="module 'front_target' defines no function 'absent'"):
        front("front_target", "absent")
    with pytest.raises(ValueError, match=r"front_target.takes_any takes \*\*options: a front knows only "
                                         r"\*\*generate_kwargs"):
        front("front_target", "takes_any")


@pytest.mark.parametrize("source", [
    "def f(a, b=1, /, c=(0,), *rest, d, e: int = E, **more) -> int: ...",
    "def f(*, seeds: Iterable[int] | int = 3): ...",
    "def f(): ...",
])
def test_the_signature_read_from_source_is_pythons(source):
    namespace = {"E": 5}
    exec(source, namespace)  # the same def, run
    read = source_signature(ast.parse(source).body[0])
    ran = inspect.signature(namespace["f"])
    assert [(p.name, p.kind) for p in read.parameters.values()] == [(p.name, p.kind) for p in ran.parameters.values()]
    assert [repr(p.default) for p in read.parameters.values()] \
        == [("E" if p.default == 5 else repr(p.default)) for p in ran.parameters.values()]


@pytest.mark.slow  # a process of its own
def test_every_front_refuses_a_typo_before_importing_torch_transformers_or_pandas():
    """Reaching gcs.compare imported torch, transformers and pandas before its check ran: 10.6 s for a typo on a
    loaded machine. Each call below raises with none of them imported."""
    calls = {
        "compare": "gcs.compare(P, temprature=1)", "stream_compare": "gcs.stream_compare(P, temprature=1)",
        "generate": "gcs.generate(P, temprature=1)", "stream": "gcs.stream(P, sed=1)",
        "sweep": "gcs.sweep([P], temprature=1)", "compare_rounds": "gcs.compare_rounds(P, temprature=1)",
        "style_responses": "gcs.style_responses(P, seed=1)", "ab": "gcs.ab(P, None, None, methods=1)",
        "trace": "gcs.trace(P, temprature=1)", "counterfactual": "gcs.counterfactual('q', 'a', seeds=1)",
        "hindsight": "gcs.hindsight('q', [1], temprature=1)",
        "hindsight_report": "gcs.hindsight_report('q', [1], temprature=1)"}
    assert set(calls) == gcs._FRONTED
    code = f"""if True:
        import json, sys
        import gcs
        P, messages = ["q"], {{}}
        for name, call in {calls!r}.items():
            try:
                eval(call)
            except TypeError as error:
                messages[name] = str(error)
        print(json.dumps({{"messages": messages, "loaded": sorted(sys.modules)}}))"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert set(seen["messages"]) == set(calls)
    for name, message in seen["messages"].items():
        assert message.startswith(f"gcs.{name} got an unexpected keyword argument '") and "(did you mean '" in message
    heavy = {"torch", "transformers", "pandas", "plotly"} & set(seen["loaded"])
    assert not heavy and not {f"gcs.{gcs._MODULE_OF[name]}" for name in calls} & set(seen["loaded"])
