"""Comparisons with published code, which needs a checkout of it (never part of this repository) and a Python whose
environment imports it: torch 2.13.0 with transformers 4.52.4 serves ReFusion, SDAR and Fast-dLLM v2
(``python3 -m venv REFENV && REFENV/bin/pip install torch==2.13.0 transformers==4.52.4 numpy pandas tqdm``), with
4.52.3 LLaDA2. The workers run in that environment and import only torch, transformers and ``benchmarks.common``'s
torch-only modules; the project side starts them (``refusion_published.PublishedWorker``, the parity tests)."""

NEEDS = ("needs --reference CHECKOUT (ML-GSAI/ReFusion) and --reference-python PY of an environment with torch 2.13.0 "
         "and transformers 4.52.4 (benchmarks/reference/__init__.py)")
