"""What the tabs share, one job a module; nothing here imports a tab or the server (tests/test_layout.py).

- ``tab``: the ``Tab`` every tab's ``build()`` returns (its linked inputs, shared state, page-load wiring).
- ``deployment``: the models offered, the default model and the engine, read from the environment once.
- ``limits``: the demo's limits table and input parsing (the one place bounds are enforced).
- ``messages``: errors as toasts and status lines, user text shown as text, captions, handlers whose updates
  name their outputs (``by_name``).
- ``highlights``: aligned spans and shared words in responses (side by side, hindsight, A/B).
- ``links``: every tab's settings in the page's query string, and a copy-link button.
- ``logs``: the app's logger, redaction and escaping.
"""
