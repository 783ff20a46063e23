"""Many runs at once, and what they leave behind.

- ``sweeps``: methods x temperatures x seeds over paraphrase sets (``gcs.sweep``);
- ``comparison``: a side by side's scores and paired statistics (``gcs.compare_report``);
- ``rounds``: seeds in rounds until the sequential verdict is reached (``gcs.compare_rounds``);
- ``style``: how consistently responses are written: the style experiment, p_repeat per style dimension;
- ``classifiers``: how a response is written: rule-based classifiers and an LLM judge;
- ``figures``: the plotly figures of the app and the docs;
- ``data``: paraphrase sets (JSONL, CSV, built in); ``results``: a crash-safe, resumable results CSV;
  ``export``: CSV cells that cannot become spreadsheet formulas."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
