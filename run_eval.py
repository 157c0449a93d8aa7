#!/usr/bin/env python
"""Entry point: ``python run_eval.py --models refusion,qwen3 --tasks gsm8k,mbpp`` (see --help)."""

import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
