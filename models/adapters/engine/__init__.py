"""Models served over HTTP: the vLLM engine baseline in its own environment, and any OpenAI-compatible server.

``server`` launches and stops an OpenAI-compatible server as a child process, ``openai_client`` is the standard-library
HTTP client (JSON and streamed answers, retries), ``vllm_adapter`` is the engine baseline's adapter (chat messages in,
token ids back) and ``openai_adapter`` the adapter of ``openai:<url>``, any server's chat completions.
"""
