"""Baselines served by an inference engine (vLLM) in its own environment, asked over HTTP.

``server`` launches and stops an OpenAI-compatible server as a child process, ``openai_client`` is the standard-library
HTTP client, and ``vllm_adapter`` is the model adapter that sends chat messages and reads back token ids.
"""
