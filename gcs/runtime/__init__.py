"""The plumbing every layer uses, importing nothing else of gcs: how errors quote values (``quoting``), argument
shapes and the wrong type's error (``arguments``), unknown keywords refused with the nearest name (``keywords``),
every private torch, vLLM and transformers API behind one adapter (``internals``), OpenMP's idle threads
(``openmp``), work in a thread of its own (``background``), per-stage timings (``stage_timing``), request bodies read
once (``asgi``), an untrusted server's HTTP answers read within bounds of time and size (``http_reads``), and
submodules imported on first use (``lazy``). Lists of
names (methods, metrics, scores, classifiers) are read by one rule (``names``)."""
