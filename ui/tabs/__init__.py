"""The page's tabs, one module each; every tab's ``build()`` returns a ``ui.shared.tab.Tab``.

- ``side_by_side``: IS / GCS / GCSwR over several seeds, streamed, with paired statistics (a folder: its parts).
- ``stepthrough``: inside the sampler, the race behind each token (``gcs.trace``).
- ``hindsight``: what a paraphrase would have got with a response's luck (``gcs.hindsight``), and what the
  response would have been had it said something else (``gcs.counterfactual``).
- ``sweep``: consistency vs temperature.
- ``ab``: A/B with shared luck: a change to the prompt, the settings or the model, both arms under one noise.
- ``coupling``: Theorem 1 and the recycling histogram.
- ``about``: what the demo shows.

A tab imports what the tabs share (``ui.shared``) and the server's parts (``ui.server``), never another tab:
one tab's state reaches another through ``Tab.shared`` (tests/test_layout.py).
"""
