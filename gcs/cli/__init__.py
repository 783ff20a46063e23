"""The ``gcs`` command (the console script is ``gcs.cli.commands.main``).

- ``commands``: run, style and compare (one seed: ``--seed``); ``ab_commands``: ``gcs ab``;
- ``vllm_server``: ``gcs vllm-serve``, vLLM's OpenAI server with the plugin loaded;
- ``support``: what the commands share (seed lists, output folders, run records).

    gcs compare "What is DNA?" "Explain DNA." --seed 4
"""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
