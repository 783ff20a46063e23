"""The side by side tab and its parts, which only it uses.

- ``compare``: the tab (IS / GCS / GCSwR over several seeds, streamed) and its /compare endpoint.
- ``compare_rounds``: the seeds in rounds, each round's answers and verdict so far.
- ``seed_browser``: any seed's responses and heatmaps, redrawn from the run's state, and the downloads.
- ``verdict``: the score table and the headline verdict (also the /compare endpoint's).
"""
