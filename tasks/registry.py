"""The task registry: names a user can pass to ``--tasks`` (``all`` runs them in this order).

Each task reproduces the ReFusion fork's prompts, stop strings, extraction and metrics (lm-eval 0.4.9.1), with a
512-token canvas. Metric names are lm-eval's "metric,filter"; the first one is the paper's column:

==============  ==============================================================  ================================
task            metrics (primary first)                                          groups
==============  ==============================================================  ================================
mmlu_pro        exact_match,custom-extract                                       14 subjects (``category``)
arc_challenge   exact_match,remove_whitespace                                    -
gsm8k           exact_match,flexible-extract; exact_match,strict-match           -
math            math_verify,none; exact_match,none                               7 subjects (hub configs)
gpqa            exact_match,flexible-extract; exact_match,strict-match           -
humaneval       pass@1,create_test                                               -
mbpp            pass_at_1,none                                                   -
humaneval_plus  pass@1,plus; pass@1,base                                         -
mbpp_plus       pass@1,plus; pass@1,base                                         -
livecodebench   pass@1,none (also ``livecodebench_v5``, ``livecodebench_v6``)    difficulty
aime24, aime25  math_verify,none                                                 -
ifeval          prompt_level_strict_acc,none; inst_level_strict_acc,none; the    -
                same two loose
gpqa_diamond    exact_match,flexible-extract; exact_match,strict-match           -
bbh             exact_match,strict-match; exact_match,flexible-extract           27 subsets
math500         math_verify,none; exact_match,none                               7 subjects (``subject``)
==============  ==============================================================  ================================

The last two are not in the paper: HumanEval+ and MBPP+ (evalplus) with the paper's HumanEval and MBPP prompts and
extraction, scored on evalplus's base and extra tests (tasks/evalplus/plus_tasks.py). The LiveCodeBench tasks
(tasks/livecodebench/) follow lcb_runner: the whole release_v6, or the v5 and v6 contest-date windows. AIME 2024
and 2025, IFEval, GPQA diamond and BBH are the other benchmarks of the 2026 diffusion-LLM papers (docs/tasks.md).
MATH-500 (HuggingFaceH4/MATH-500, PRM800K's 500-problem test subset of MATH, which SDAR and TraDo report) is ``math``'s
prompt and scoring on those items; it is in no group.

Diagnostics per sample: ``empty``, ``invalid`` (the primary extraction found nothing; for ARC, no letter A-D; for
code, no code), and for the code tasks ``exec_status`` (passed/failed/error/timeout/memory/no_code) and
``exec_output_tail``. The fork replaced every answer holding a python block by that block; here that rule applies
to the two code tasks only, since on math answers it throws the reasoning (and often the answer) away.
"""

from __future__ import annotations

from typing import Callable

from tasks.aime import AIME, AIME24, AIME25
from tasks.arc_challenge import ARCChallenge
from tasks.base import Task
from tasks.bbh import BBH
from tasks.evalplus.plus_tasks import HumanEvalPlus, MBPPPlus
from tasks.gpqa import GPQA, GPQADiamond
from tasks.gsm8k import GSM8K
from tasks.hendrycks_math import HendrycksMath
from tasks.humaneval import HumanEval
from tasks.ifeval import IFEval
from tasks.livecodebench.task import WHOLE_V6, WINDOW_V5, WINDOW_V6, LiveCodeBench
from tasks.math500 import Math500
from tasks.mbpp import MBPP
from tasks.mmlu_pro import MMLUPro

# The order of the paper's table.
TASKS: dict[str, Callable[[], Task]] = {
    "mmlu_pro": MMLUPro,
    "arc_challenge": ARCChallenge,
    "gsm8k": GSM8K,
    "math": HendrycksMath,
    "gpqa": GPQA,
    "humaneval": HumanEval,
    "mbpp": MBPP,
    # Beyond the paper: evalplus's HumanEval+ and MBPP+.
    "humaneval_plus": HumanEvalPlus,
    "mbpp_plus": MBPPPlus,
    # The benchmarks of the 2026 diffusion-LLM papers.
    "livecodebench": lambda: LiveCodeBench("livecodebench", WHOLE_V6),
    "livecodebench_v5": lambda: LiveCodeBench("livecodebench_v5", WINDOW_V5),
    "livecodebench_v6": lambda: LiveCodeBench("livecodebench_v6", WINDOW_V6),
    "aime24": lambda: AIME(AIME24),
    "aime25": lambda: AIME(AIME25),
    "ifeval": IFEval,
    "gpqa_diamond": GPQADiamond,
    "bbh": BBH,
    # MATH's 500-problem subset, which the 2026 reasoning papers report as MATH500.
    "math500": Math500,
}


# The seven benchmarks of the ReFusion paper, in its column order: what ``--tasks all`` runs.
PAPER_TASKS = ("mmlu_pro", "arc_challenge", "gsm8k", "math", "gpqa", "humaneval", "mbpp")

# Names that stand for several tasks on ``--tasks``: ``all`` the paper's seven, ``dllm-2026`` the benchmarks the
# 2026 diffusion-LLM papers report.
GROUPS: dict[str, tuple[str, ...]] = {
    "all": PAPER_TASKS,
    "dllm-2026": ("livecodebench_v6", "aime24", "aime25", "ifeval", "gpqa_diamond", "bbh"),
}


def task_names() -> list[str]:
    return list(TASKS)


def make_task(name: str) -> Task:
    """A registry task, or ``lmeval:<task>``: any generative lm-eval task (tasks/lmeval_bridge.py)."""
    if name.startswith("lmeval:"):
        from tasks.lmeval_bridge import LMEvalTask

        return LMEvalTask.from_name(name.removeprefix("lmeval:"))
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    return TASKS[name]()
