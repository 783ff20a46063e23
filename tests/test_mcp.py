"""The app's endpoints as MCP tools (Gradio's MCP server at /gradio_api/mcp/), driven by the real ``mcp`` client
against the app launched as users launch it (``python app.py``)."""

from __future__ import annotations

import ast
import asyncio
import inspect

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from waiting import app_client, patiently, served

import ui

TOOLS = {"compare", "trace", "hindsight", "counterfactual", "sweep", "ab", "coupling"}


def mcp_session(app_url: str):
    """The MCP client's connection to the app, its requests with no timeout (mcp's default gives up after 30 s,
    a stream's read after 300 s): each call is waited for on the app's progress (``waiting.patiently``)."""
    http = httpx.AsyncClient(timeout=None)
    return http, streamable_http_client(f"{app_url}gradio_api/mcp/", http_client=http)


def tool_result(app_url: str, app_progress, name: str, arguments: dict) -> CallToolResult:
    """One MCP tool call through the client's transport, as a client gets its result (an error included), once the
    session listed every tool."""

    async def call():
        http, connection = mcp_session(app_url)
        async with http, connection as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = {tool.name for tool in (await session.list_tools()).tools}
                result = await session.call_tool(name, arguments)
                return listed, result

    listed, result = patiently(lambda: asyncio.run(call()), f"the {name} tool's answer", app_progress)
    assert listed == TOOLS
    return result


def call_tool(app_url: str, app_progress, name: str, arguments: dict):
    """One MCP tool call; the result's text parsed back into the endpoint's dict (Gradio writes it as a Python
    literal: None for null)."""
    result = tool_result(app_url, app_progress, name, arguments)
    assert not result.isError, result.content
    (content,) = result.content
    return ast.literal_eval(content.text)


@pytest.mark.slow
def test_the_schema_lists_every_public_endpoint_with_its_parameters_described(app_url, app_progress):
    schema = served("GET", f"{app_url}gradio_api/mcp/schema", app_progress).json()
    tools = {tool["name"]: tool for tool in schema}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        function = ui.ENDPOINTS[name][0]
        assert len(tool["description"]) > 80 and "Returns:" in tool["description"], name
        properties = tool["inputSchema"]["properties"]
        assert list(properties) == list(inspect.signature(function).parameters), name
        undescribed = [parameter for parameter, spec in properties.items() if len(spec["description"]) < 8]
        assert not undescribed, f"{name}: {undescribed} have no description"
    assert tools["compare"]["inputSchema"]["properties"]["temperature"]["type"] == "number"
    assert tools["trace"]["inputSchema"]["properties"]["max_new_tokens"]["type"] == "integer"
    assert tools["hindsight"]["inputSchema"]["properties"]["finished"]["type"] == "boolean"


@pytest.mark.slow
def test_a_coupling_tool_call_returns_the_documented_result(app_url, app_progress):
    result = call_tool(app_url, app_progress, "coupling", {"p": "0.6, 0.3, 0.1", "trials": 400, "steps": 400})
    assert set(result) == {"curve", "recycling", "recycling_chi_square_p"}
    first = result["curve"][0]
    assert first["epsilon"] == 0 and first["theorem1"] == pytest.approx(1.0)  # q = p: shared noise always agrees
    assert first["independent"] == pytest.approx(0.6**2 + 0.3**2 + 0.1**2)
    assert 0 <= result["recycling_chi_square_p"] <= 1 and len(result["recycling"]) == 3


@pytest.mark.slow
def test_a_compare_tool_call_gives_what_the_http_api_gives(app_url, app_progress):
    paraphrases = "What is DNA?\nExplain DNA briefly."
    arguments = {"paraphrases": paraphrases, "temperature": 1.0, "max_new_tokens": 8, "seeds": [5],
                 "methods": "is,gcswr"}
    by_tool = call_tool(app_url, app_progress, "compare", arguments)
    by_http = app_client(app_url, app_progress).predict(paraphrases, 1.0, 8, [5], 1.0, "is,gcswr",
                                                        api_name="/compare")
    assert by_tool["paraphrases"] == paraphrases.splitlines()
    assert by_tool["responses"] == by_http["responses"]  # same seed, same answers, whichever door
    assert set(by_tool["responses"]) == {"is", "gcswr"} and by_tool["settings"]["seeds"] == [5]
    assert "verdict" in by_tool and "summary" in by_tool


@pytest.mark.slow
def test_a_bad_tool_call_is_an_error_naming_the_problem(app_url, app_progress):
    result = tool_result(app_url, app_progress, "trace", {"paraphrases": "only one line", "max_new_tokens": 4})
    assert result.isError and "enter exactly 2 paraphrases" in result.content[0].text


@pytest.mark.parametrize("setting, served", [("0", False), ("off", False), ("1", True)])
def test_gcs_mcp_turns_the_tools_off(monkeypatch, setting, served):
    monkeypatch.setenv("GCS_MCP", setting)
    assert ui.mcp_server() is served


@pytest.mark.slow
def test_an_ab_tool_call_answers_both_arms_with_the_control(app_url, app_progress):
    result = call_tool(app_url, app_progress, "ab", {"prompts": "What is DNA?", "b_system": "Answer in one word.",
                                                     "seeds": 2, "max_new_tokens": 8})
    assert set(result) == {"lines", "effects", "rows"}
    rows = result["rows"]
    assert sorted((row["method"], row["seed"]) for row in rows) == [("gcswr", 0), ("gcswr", 1), ("is", 0), ("is", 1)]
    assert all(row["answer_a"] == row["answer_b"] for row in rows if row["identical"])
    assert result["lines"][0].startswith("B against A, 1 prompt x 2 seeds with shared luck")
