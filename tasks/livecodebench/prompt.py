"""lcb_runner's prompt for chat models and its code extraction (``prompts/code_generation.py``,
``utils/extraction_utils.py``).

The chat styles (OpenAI chat, Llama 3, Mistral, ...) send a system message and the generic question template; the
harness renders them through each model's own chat template, as lcb_runner's vLLM runner does for open models.
Its vLLM runner stops at ``###`` (``--stop`` default), so the harness cuts the answer there too.
"""

from __future__ import annotations

SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will generate a "
    "correct Python program that matches the specification and passes all tests."
)
WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and enclose your code within "
    "delimiters."
)
WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the sample "
    "inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, it reads the "
    "inputs, runs the algorithm and writes output to STDOUT."
)
STOP = ("###",)
FENCE = "```"


def user_message(question_content: str, starter_code: str) -> str:
    """The generic question template: the question, the format (starter code, or stdin/stdout), the answer cue."""
    if starter_code:
        fmt = f"### Format: {WITH_STARTER_CODE}\n```python\n{starter_code}\n```\n\n"
    else:
        fmt = f"### Format: {WITHOUT_STARTER_CODE}\n```python\n# YOUR CODE HERE\n```\n\n"
    return f"### Question:\n{question_content}\n\n{fmt}### Answer: (use the provided format with backticks)\n\n"


def extract_code(output: str) -> str:
    """The lines between the last two lines that hold a fence; empty when there are fewer than two such lines."""
    lines = output.split("\n")
    fences = [i for i, line in enumerate(lines) if FENCE in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1:fences[-1]])
