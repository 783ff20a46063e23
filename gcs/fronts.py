"""``gcs.NAME`` for the entry points that load a model: their keywords checked before their modules are imported.

``gcs.compare`` lives in a module that imports torch, transformers and pandas (seconds, ten on a loaded machine), so
a typo reached its check only after that wait. Here each such entry point is reached through a front that reads the
entry point's keyword names and docstring from its source (``ast``: milliseconds, nothing imported), refuses an
unknown keyword with the entry point's own message, then imports the module and calls the entry point itself, which
checks everything else. The front shows the entry point's signature and docstring (``help``, ``inspect``); editors and
type checkers read the real function (gcs/__init__.py's ``TYPE_CHECKING`` imports).

>>> import gcs
>>> gcs.compare(["What is DNA?"], temprature=0.7)  # refused with torch not imported
Traceback (most recent call last):
...
gcs.runtime.arguments.ArgumentTypeError: gcs.compare got an unexpected keyword argument 'temprature' (did you mean \
'temperature'?)
>>> import inspect
>>> inspect.signature(gcs.compare).parameters["seeds"]
<Parameter "seeds: Iterable[int] | int = (0,)">
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path

from gcs.runtime.keywords import refuse_unknown
from gcs.settings import check_generate_kwargs

GENERATE_KWARGS = "generate_kwargs"  # the extra keywords an entry point passes on to transformers' generate


class SourceText:
    """A default value that is a name or an expression (``model=DEFAULT_MODEL``), shown as its source reads: evaluating
    it would import the module. A literal default (``seeds=(0,)``, ``top_k=None``) is its value.

    >>> SourceText("DEFAULT_MODEL")
    DEFAULT_MODEL
    """

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


@functools.cache
def _definitions(module: str) -> dict[str, ast.FunctionDef]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module named {module!r}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def source_signature(definition: ast.FunctionDef) -> inspect.Signature:
    """The signature ``definition`` declares: a literal default as its value, any other default and every annotation
    as its source text (``SourceText``).

    >>> tree = ast.parse("def f(a, /, b=1, *more, seeds=SEEDS, top_k=None, **options: int): ...")
    >>> signature = source_signature(tree.body[0])
    >>> signature
    <Signature (a, /, b=1, *more, seeds=SEEDS, top_k=None, **options: int)>
    >>> signature.parameters["top_k"].default is None  # a literal is its value; a name, its text
    True
    """
    arguments = definition.args

    def text(node: ast.expr | None):
        return inspect.Parameter.empty if node is None else SourceText(ast.unparse(node))

    def default(node: ast.expr | None):
        try:
            return inspect.Parameter.empty if node is None else ast.literal_eval(node)
        except ValueError:  # a name or a call
            return text(node)

    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    parameters = [inspect.Parameter(argument.arg, kind, default=default(value), annotation=text(argument.annotation))
                  for index, (argument, value) in enumerate(zip(positional, defaults, strict=True))
                  for kind in [inspect.Parameter.POSITIONAL_ONLY if index < len(arguments.posonlyargs)
                               else inspect.Parameter.POSITIONAL_OR_KEYWORD]]
    if arguments.vararg:
        parameters.append(inspect.Parameter(arguments.vararg.arg, inspect.Parameter.VAR_POSITIONAL,
                                            annotation=text(arguments.vararg.annotation)))
    parameters += [inspect.Parameter(argument.arg, inspect.Parameter.KEYWORD_ONLY, default=default(value),
                                     annotation=text(argument.annotation))
                   for argument, value in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)]
    if arguments.kwarg:
        parameters.append(inspect.Parameter(arguments.kwarg.arg, inspect.Parameter.VAR_KEYWORD,
                                            annotation=text(arguments.kwarg.annotation)))
    return inspect.Signature(parameters, return_annotation=text(definition.returns))


def front(module: str, name: str) -> Callable:
    """The function ``module.name`` behind a keyword check that imports nothing: an unknown keyword gets the entry
    point's own message (``check_generate_kwargs`` where its extra keywords go to transformers' generate, else
    ``unexpected_keyword``); any other call is the function's own, imported on first use.

    >>> compare = front("gcs.generation.responses", "compare")
    >>> compare.__name__, compare.__module__
    ('compare', 'gcs')
    >>> compare(["q"], seed=3)
    Traceback (most recent call last):
    ...
    gcs.runtime.arguments.ArgumentTypeError: gcs.compare got an unexpected keyword argument 'seed' (did you mean \
'seeds'?)
    """
    definition = _definitions(module).get(name)
    if definition is None:
        raise AttributeError(f"module {module!r} defines no function {name!r}")
    signature = source_signature(definition)
    names = frozenset(parameter.name for parameter in signature.parameters.values()
                      if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD))
    extra = next((parameter.name for parameter in signature.parameters.values()
                  if parameter.kind is parameter.VAR_KEYWORD), None)
    if extra not in (None, GENERATE_KWARGS):
        raise ValueError(f"{module}.{name} takes **{extra}: a front knows only **{GENERATE_KWARGS}")

    def checked(*args, **kwargs):
        if extra:
            if unknown := {key: value for key, value in kwargs.items() if key not in names}:
                check_generate_kwargs(checked, unknown)
        else:
            refuse_unknown(f"gcs.{name}", kwargs, names)
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = name
    checked.__module__ = "gcs"  # what it is: gcs.NAME (pickled by that name, it is this front again)
    checked.__doc__ = ast.get_docstring(definition, clean=False)
    checked.__signature__ = signature  # type: ignore[attr-defined]
    checked.__annotations__ = {parameter.name: parameter.annotation.text for parameter in signature.parameters.values()
                               if isinstance(parameter.annotation, SourceText)}
    if isinstance(signature.return_annotation, SourceText):  # (as strings, as the entry points' modules keep theirs)
        checked.__annotations__["return"] = signature.return_annotation.text
    return checked
