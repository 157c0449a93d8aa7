"""The tiny adapters with options small enough for a 24-token canvas, and chat requests for them: shared by the
adapter tests on the CPU (tests/models) and on a device (tests/cuda)."""

from __future__ import annotations

from models.base import GenerationRequest, Message


def chat(question: str, canvas: int = 24, prefill: str | None = None, system: str | None = None) -> GenerationRequest:
    turns = ([Message("system", system)] if system else []) + [Message("user", question)]
    turns += [Message("assistant", prefill)] if prefill else []
    return GenerationRequest(messages=tuple(turns), canvas_tokens=canvas)


REQUESTS = [chat("What is 2 + 2?"), chat("A much longer question about apples, pears and 17 oranges?"),
            chat("Pick one.", prefill="The best answer is")]


# The Fast-dLLM rows use a cache and a threshold; the block-diffusion rows run their registry defaults (Fast-dLLM v2
# on 8-token blocks, so a 24-token canvas spans several).
CASES = {
    "tiny-qwen3": {},
    "tiny-refusion": {"slot_size": 4, "serial_num_blocks": 2},
    "tiny-llada": {"steps": 12},
    "tiny-dream": {"steps": 12},
    "tiny-llada-fastdllm": {"block_length": 8, "threshold": 0.9, "cache": "dual"},
    "tiny-dream-fastdllm": {"block_length": 8, "threshold": 0.9, "cache": "prefix"},
    "tiny-sdar": {},
    "tiny-fastdllm-v2": {"block_length": 8, "sub_block_length": 4},
}
