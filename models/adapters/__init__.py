"""Model adapters: one module per family (transformers causal LMs, native networks, engine-served baselines)."""
