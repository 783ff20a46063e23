"""What gcs keeps loaded is bounded and can be let go: ``gcs.close()`` drops the models, the embedders and the vLLM
engines it keeps, and no more than ``gcs.engines.vllm.MAX_ENGINES`` engines live at once (the least recently used
idle one is shut down; a busy one stays). Each check runs in a process of its own, so that the suite's shared models
and engines are not dropped under other tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(source: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_close_drops_the_models_and_embedders_gcs_keeps():
    out = run_script("""
        import gc, weakref
        import gcs
        model = gcs.load_model()
        assert gcs.load_model() is model  # kept between calls
        kept, held = weakref.ref(model.model), gcs.embedder("minilm")
        before = held(["a sentence"])
        del model
        assert gcs.close() == {"models": 0, "embedders": 0, "engines": 0}
        gc.collect()
        assert kept() is None, "gcs still holds the model after close()"
        assert (held(["a sentence"]) == before).all()  # what the caller holds stays usable
        again = gcs.load_model()
        assert again.model is not None and gcs.generate(["Hi"], method="gcswr", seed=1, max_new_tokens=4, model=again)
        print("ok")
    """)
    assert out.strip().endswith("ok")


@pytest.mark.slow
def test_vllm_engines_are_bounded_and_closed_unless_busy():
    out = run_script("""
        import gcs
        import gcs.engines.vllm as engines
        engines.MAX_ENGINES = 1
        model = gcs.load_model()
        first = gcs.generate(["What is DNA?"], method="gcswr", seed=3, max_new_tokens=8, model=model, engine="vllm")
        (old, _), = engines._ENGINES.values()
        other, _ = engines.engine(model, max_model_len=1024)  # other options: a second engine, over the bound
        assert list(engines._ENGINES.values())[0][0] is other and len(engines._ENGINES) == 1
        assert old in engines._CLOSED, "the least recently used idle engine was not shut down"
        assert "vllm-shutdown" not in engines.internals._SAID, "vLLM's engine core could not be shut down"
        again = gcs.generate(["What is DNA?"], method="gcswr", seed=3, max_new_tokens=8, model=model, engine="vllm")
        assert again == first, (first, again)  # a new engine, the same tokens
        stream = gcs.stream(["What is DNA?"], method="gcswr", seed=3, max_new_tokens=8, model=model, engine="vllm")
        next(stream)  # a run in flight holds its engine
        assert gcs.close()["engines"] == 1, "a busy engine was shut down under its run"
        for _ in stream:
            pass
        assert gcs.close() == {"models": 0, "embedders": 0, "engines": 0}
        print("ok")
    """)
    assert out.strip().endswith("ok")
