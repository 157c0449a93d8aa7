"""Fast-dLLM (v1): confidence-threshold parallel decoding with a block-wise prefix or dual KV cache.

``core`` is what both samplers share (how a step calls the network in each cache mode, which masks a step commits);
``llada_sampler`` and ``dream_sampler`` are the two published samplers on the harness's LLaDA and Dream networks.
"""
