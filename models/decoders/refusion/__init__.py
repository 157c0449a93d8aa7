"""ReFusion: slot-level plan-and-infill with a reordered, fully reused KV cache.

``decoder`` is the algorithm, written per row as a generator of network requests; ``cache`` is the cache interface
both networks (native Qwen3, transformers' Qwen3ForCausalLM) implement and the driver that batches the rows.
"""
