"""``dllm-lm-eval``: lm-eval's own command line, with one-line errors for bad harness model arguments.

Plain ``lm_eval --model refusion ...`` works too (the plugin in ``harness/lmeval/plugin.py``); it prints a traceback
where this prints ``error: ...`` and exits with 2. Every option and output is lm-eval's: the arguments go to its CLI
unchanged.
"""

from __future__ import annotations

import sys
from typing import Sequence

from harness.errors import USAGE_ERROR, UserError


def main(argv: Sequence[str] | None = None) -> int:
    from lm_eval.__main__ import cli_evaluate

    from harness.lmeval.plugin import register_models

    args = list(sys.argv[1:] if argv is None else argv)
    register_models()  # a no-op after the .pth hook; covers interpreters that skip .pth files (python -S, --target)
    sys.argv = ["lm-eval", *args]  # lm-eval's parser reads sys.argv itself
    try:
        cli_evaluate()
    except (UserError, NotImplementedError) as error:  # lm-eval's own for what a model cannot do
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    return 0
