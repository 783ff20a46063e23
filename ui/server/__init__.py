"""The server around the tabs: what every request passes before and after a tab's handler runs.

- ``http_limits``: request bodies, URLs and uploads bounded before Gradio parses them, closed routes and unknown
  endpoints, the sessions the server keeps.
- ``http_guard``: no request, whatever it sends, gets a 500 for its input, a dropped connection or a traceback in
  the log.
- ``arguments``: every endpoint's arguments checked against its type annotations (HTTP, gradio_client, MCP).
- ``serving``: each lane's waiting limit, input errors said plainly, cancellable work, the downloads kept.
- ``mcp_calls``: MCP tool calls stop when their client leaves; MCP errors stay short.
- ``internals``: every private Gradio and ``mcp`` API the app uses, each behind one function that warns where it
  changed; ``page_assets``: Gradio's front-end bundles served patched; ``startup``: a launch a loaded machine
  slows but does not break.
- ``zerogpu``: the ``@gpu`` decorator (``ui`` imports it first, before anything touches CUDA).

The server imports what the tabs share (``ui.shared``), never a tab (tests/test_layout.py).
"""
