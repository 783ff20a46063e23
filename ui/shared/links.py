"""Shareable links: every tab's settings round-trip through the page's query parameters.

    https://…/?tab=trace&q=Why+is+the+sky+blue%3F%0AWhat+makes+it+blue%3F&method=gcs&seed=3

``tab`` picks the tab; the other parameters set that tab's inputs (each tab names its own, see its
``build``). A malformed parameter is ignored with a toast naming it; the page loads with the rest.
"""

from __future__ import annotations

import html
import math
import re
import urllib.parse

import gradio as gr

from gcs.runtime.names import parse_names
from ui.shared.limits import quoted
from ui.shared.logs import logger
from ui.shared.messages import brief

MAX_QUERY_CHARACTERS = 20_000
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _choices(component) -> list:
    return [value for _, value in getattr(component, "choices", None) or []]


def parse_value(component, text: str):
    """The value ``text`` (from a query string) means for ``component``, or ValueError saying what it must be."""
    if isinstance(component, (gr.Slider, gr.Number)):
        text = text.strip()
        if not _NUMBER.fullmatch(text):  # ASCII digits only: float() also reads '٣' and '1_0'
            raise ValueError("must be a number")
        # a whole number is read exactly: through a float, 9007199254740993 would become ...992
        value = int(text) if re.fullmatch(r"[+-]?[0-9]{1,30}", text) else float(text)
        low, high = getattr(component, "minimum", None), getattr(component, "maximum", None)
        if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"must be a number from {low if low is not None else '-∞'} to "
                             f"{high if high is not None else '∞'}")
        whole = isinstance(component, gr.Number) and component.precision == 0
        if whole and value != int(value):
            raise ValueError("must be a whole number")
        return int(value) if whole or (isinstance(component, gr.Slider) and value == int(value)) else value
    if isinstance(component, gr.Checkbox):
        if text.lower() not in ("true", "false"):
            raise ValueError("must be true or false")
        return text.lower() == "true"
    if isinstance(component, gr.CheckboxGroup):
        try:
            return parse_names(text, _choices(component), what="choice", empty_ok=True)
        except ValueError as error:  # said after the parameter's name and value, as the other refusals here
            raise ValueError(f"has an {error}") from None
    if isinstance(component, (gr.Radio, gr.Dropdown)) and _choices(component):
        if text not in _choices(component):
            raise ValueError(f"must be one of {', '.join(map(str, _choices(component)))}")
        return text
    return text


def format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return "" if value is None else str(value)


class NoStepAsked(gr.Error):
    """Ends a page load's chain where its link asks for no step: nothing is queued in the model lane (a load that
    asked for no trace must not wait there behind other visitors' runs). Never shown."""

    def __init__(self):
        super().__init__("the link asks for no step", visible=False, print_exception=False)


def linked_step(tab: str, token):
    """After a link is applied: its step (``tab=trace&step=k``, k >= 1) asks the step-through for the trace up to
    token k; any other link raises ``NoStepAsked``, which ends the load's chain before the model lane.

    >>> linked_step("trace", 10)
    10
    """
    if tab == "trace" and isinstance(token, (int, float)) and token >= 1:
        return int(token)
    raise NoStepAsked()


class Links:
    """The tabs' inputs by query-parameter name, and the two events that use them."""

    def __init__(self, tabs: gr.Tabs, inputs_by_tab: dict[str, dict[str, gr.components.Component]],
                 selected: gr.State):
        self.tabs, self.inputs_by_tab, self.selected = tabs, inputs_by_tab, selected
        self.components = [c for inputs in inputs_by_tab.values() for c in inputs.values()]

    def apply(self, request: gr.Request) -> list:
        """``demo.load``: the link's tab (as the Tabs update and as the remembered tab; no change to either without
        one), then a value (or no change) for every component.

        Without a tab in the link the remembered tab is left alone: the load's answer can come after a tab the user
        (or a browser test, on a busy machine) clicked at once, and must not reset it to the first tab, or "Copy a
        link" would give the first tab's link while another is shown."""
        params = dict(request.query_params) if request is not None else {}
        updates = {id(c): gr.skip() for c in self.components}
        tab = params.pop("tab", None)
        problems = []
        if sum(len(k) + len(v) for k, v in params.items()) > MAX_QUERY_CHARACTERS:
            problems.append("the link is too long")
            params = {}
        if tab is not None and tab not in self.inputs_by_tab:
            problems.append(f"tab {quoted(tab, 40)} does not exist")
            tab = None
        inputs = self.inputs_by_tab.get(tab or "compare", {})
        for name, text in params.items():
            if name not in inputs:
                problems.append(f"{quoted(name, 40)} is not a setting of this tab")
                continue
            try:
                updates[id(inputs[name])] = parse_value(inputs[name], text)
            except ValueError as error:
                problems.append(f"{name} {quoted(text, 40)} {error}")
        if problems:
            said = "; ".join(problems)
            logger.info("link parameters ignored: %s", ascii(said)[:300])  # one line: no raw newline or escape code
            gr.Warning(brief("Ignored in the link: " + html.escape(said)), duration=10)  # the link's text, as text
        return [gr.Tabs(selected=tab) if tab else gr.skip(), tab or gr.skip(),
                *[updates[id(c)] for c in self.components]]

    def query(self, tab: str, *values) -> str:
        """The query string (``?tab=…&…``) that reproduces ``tab``'s current settings."""
        by_component = dict(zip(map(id, self.components), values, strict=True))
        if tab not in self.inputs_by_tab:  # the About tab has no settings
            return "?tab=" + urllib.parse.quote(tab)
        inputs = self.inputs_by_tab[tab]
        pairs = [("tab", tab)] + [(name, format_value(by_component[id(c)])) for name, c in inputs.items()]
        return "?" + urllib.parse.urlencode(pairs)

    def wire(self, demo: gr.Blocks, button: gr.Button, box: gr.Textbox):
        """Copy-link button -> query string -> the page's full URL in ``box`` (and the clipboard, where allowed);
        the page load applies a link. Returns the load event (more can be chained on it)."""
        to_url = ("(query) => { const url = window.location.origin + window.location.pathname + query; "
                  "try { navigator.clipboard.writeText(url); } catch (error) {} return url; }")
        button.click(self.query, [self.selected, *self.components], box, api_visibility="private").then(
            None, box, box, js=to_url, api_visibility="private")
        return demo.load(self.apply, None, [self.tabs, self.selected, *self.components], api_visibility="private")
