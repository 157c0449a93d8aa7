"""Parity with lm-eval's own task pipelines (installed 0.4.13), run offline on the same items and outputs.

lm-eval loads its built-in task YAMLs (``include:``d from a temporary folder, with the data pointed at local JSON
files and zero shots), renders the prompts through a chat template, asks a scripted ``LM`` for the outputs below,
and scores them with its own filters and metrics. The harness scores the same outputs; every per-sample score must
agree, and so must the rendered prompt, the stop strings, the target and the extracted answer.

Where lm-eval moved on after the fork (0.4.9.1), the harness follows the fork. Each such case below is designed to
hit one of those differences and declares it; the test asserts that exactly the declared cases differ:

* ARC ``remove_whitespace``: the fork strips only the left side.
* GPQA flexible-extract's choice-text fallback: the fork deletes "[...]" notes from the choices and takes the first
  choice (in choice order) whose text occurs, where 0.4.13 tries longer choices first.
* MATH ``exact_match``: the fork's normalisation mangles ``\\infty`` and ``\\left`` and has no identical-string
  shortcut (``math_verify`` is the same in both).

Two prompt-only differences follow from the same version gap (the scores are still compared on those items): the
GPQA answer text shown to the model loses its "[...]" note in the fork, and 0.4.13 strips MMLU-Pro options that
the fork printed as they are.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.model import LM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from tasks.arc_challenge import ARCChallenge  # noqa: E402
from tasks.base import Task, TaskPrompt  # noqa: E402
from tasks.gpqa import GPQA, with_choices  # noqa: E402
from tasks.gsm8k import GSM8K  # noqa: E402
from tasks.hendrycks_math import SUBJECTS as MATH_SUBJECTS  # noqa: E402
from tasks.hendrycks_math import HendrycksMath  # noqa: E402
from tasks.mmlu_pro import MMLUPro  # noqa: E402

BUILTIN = Path(lm_eval.__file__).resolve().parent / "tasks"
TAG = re.compile(r"\(case (\d+)\)")


@dataclass(frozen=True)
class Case:
    """One item and one output. ``differs`` maps a metric to the harness's (the fork's) score where lm-eval 0.4.13
    scores differently; ``prompt_differs`` says the rendered prompt is expected to differ, and why."""

    task: str
    record: dict[str, Any]
    output: str
    differs: dict[str, float] = field(default_factory=dict)
    prompt_differs: str = ""
    choice_order_needed: Callable[[list[str]], bool] | None = None  # GPQA: a condition on the shown order
    target_differs: bool = False  # MATH: the fork's normalisation also changes this item's gold answer


def render(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """A Qwen-style template; without a generation prompt the last (assistant) turn is left open, as
    ``continue_final_message`` does."""
    closed = messages if add_generation_prompt else messages[:-1]
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in closed)
    if add_generation_prompt:
        return text + "<|im_start|>assistant\n"
    return text + f"<|im_start|>{messages[-1]['role']}\n{messages[-1]['content']}"


def render_prompt(prompt: TaskPrompt) -> str:
    messages = [{"role": "system", "content": prompt.system}] if prompt.system is not None else []
    messages.append({"role": "user", "content": prompt.user})
    if prompt.prefill is not None:
        messages.append({"role": "assistant", "content": prompt.prefill})
    return render(messages, add_generation_prompt=prompt.prefill is None)


# ---------------------------------------------------------------------------------------------------------- cases
def gsm8k_cases() -> list[Case]:
    def case(output: str, gold: str = "18") -> Case:
        question = "A farmer has 16 eggs, uses 7 and sells the rest at $2 each. How much does he earn?"
        return Case("gsm8k", {"question": question, "answer": f"16 - 7 = 9 eggs, 9 * 2 = 18.\n#### {gold}"}, output)

    return [
        case("He sells 16 - 7 = 9 eggs for 9 * 2 = 18 dollars. The answer is 18."),
        case("The answer is $18."),
        case("The answer is 1,800.", gold="1,800"),
        case("The answer is 1,800.", gold="1800"),
        case("The answer is 17."),
        case(""),
        case("I cannot solve this."),
        case("The answer is 18. Though with 20 eggs it would be 26."),
        case("The answer is -5.", gold="-5"),
        case("**18**"),
        case("The answer is 18"),
        case("The answer is 18.00."),
        case("Q: The answer is 18.\n"),
    ]


ARC_ITEM = {"id": "Parity_1", "question": "Which force pulls objects toward Earth?",
            "choices": {"text": ["friction", "gravity", "magnetism", "tension"], "label": ["A", "B", "C", "D"]},
            "answerKey": "B"}


def arc_cases() -> list[Case]:
    def case(output: str, record: dict[str, Any] = ARC_ITEM, **kwargs: Any) -> Case:
        return Case("arc_challenge", dict(record), output, **kwargs)

    numeric = {**ARC_ITEM, "choices": {"text": ARC_ITEM["choices"]["text"], "label": ["1", "2", "3", "4"]},
               "answerKey": "2"}
    five = {**ARC_ITEM, "question": "  Which one is a planet?  ",
            "choices": {"text": ["Moon", "Sun", "Mars", "Comet", "Star"], "label": list("ABCDE")}, "answerKey": "C"}
    three = {**ARC_ITEM, "choices": {"text": ["friction", "gravity", "tension"], "label": list("ABC")}}
    return [
        case(" B"),
        case(" (B)"),
        case(" b"),
        case(":B"),
        case(" C"),
        case(""),
        case(" B) because gravity pulls"),
        case(" B ", differs={"exact_match,remove_whitespace": 0.0}),
        case(" B\n", differs={"exact_match,remove_whitespace": 0.0}),
        case(" B", numeric),
        case(" C", five),
        case(" E", five),
        case(" B", three),
    ]


MATH_ITEM = {"problem": "What is $\\frac{3}{6}$ in lowest terms?", "level": "Level 1", "type": "Prealgebra",
             "solution": "Dividing by 3 gives $\\boxed{\\frac{1}{2}}$."}


def math_cases() -> list[Case]:
    def case(output: str, record: dict[str, Any] = MATH_ITEM, **kwargs: Any) -> Case:
        return Case("math", dict(record), output, **kwargs)

    final = "Final Answer: The final answer is {}. I hope it is correct."
    interval = {"problem": "Solve $x \\le 3$.", "level": "Level 2", "type": "Algebra",
                "solution": "The solution set is $\\boxed{(-\\infty,3]}$."}
    polar = {"problem": "Convert $(0,3)$ to polar coordinates.", "level": "Level 2", "type": "Precalculus",
             "solution": "So the point is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$."}
    pair = {"problem": "Find the ordered pair.", "level": "Level 3", "type": "Intermediate Algebra",
            "solution": "Thus $(a,b) = \\boxed{(1,2)}$."}
    count = {"problem": "How many ways are there to choose 2 of 5?", "level": "Level 1",
             "type": "Counting & Probability", "solution": "There are $\\binom52 = \\boxed{10}$ ways."}
    return [
        case("Dividing by 3, the fraction is $\\boxed{\\frac{1}{2}}$."),
        case(final.format("$\\frac{1}{2}$")),
        case(final.format("$0.5$")),
        case(final.format("$\\frac12$")),
        case("The answer is $\\boxed{3}$."),
        case(""),
        case("no idea at all"),
        case("```python\nprint(3/6)\n```\nSo it is $\\boxed{\\frac{1}{2}}$."),
        case(final.format("10"), count),
        case("There are $\\boxed{10}$ ways.", count),
        case(final.format("$(-\\infty,3]$"), interval, differs={"exact_match,none": 0.0}, target_differs=True),
        case("So $x \\in \\boxed{(-\\infty, 3]}$.", interval, target_differs=True),
        case(final.format("$\\left( 3, \\frac{\\pi}{2} \\right)$"), polar, differs={"exact_match,none": 0.0},
             target_differs=True),
        case(final.format("$(1,2)$"), pair, differs={"exact_match,none": 0.0}),
        case(final.format("$(2,1)$"), pair),
    ]


def mmlu_pro_cases() -> list[Case]:
    def case(output: str, category: str = "computer science", options: list[str] | None = None, **kwargs) -> Case:
        record = {"question_id": 1, "question": "Which structure gives O(1) average lookup by key?",
                  "options": options or ["linked list", "hash table", "binary heap", "stack", "queue"],
                  "answer": "B", "answer_index": 1, "cot_content": "", "category": category, "src": "parity"}
        return Case("mmlu_pro", record, output, **kwargs)

    return [
        case("A hash table hashes the key, so the answer is (B)."),
        case("the answer is B"),
        case("The answer is (B)", category="engineering"),
        case("the answer is (C). Wait, the answer is (B).", category="math"),
        case("Answer: B"),
        case(""),
        case("the answer is (b)"),
        case("so the answer is (J)", category="other"),
        case("the answer is (B).", options=[" linked list", "hash table ", "binary heap", "stack", "queue"],
             prompt_differs="0.4.13 strips options in the prompt; the fork (0.4.9.1) printed them as they are"),
    ]


GPQA_ORDER = {"Record ID": "parity-1", "Question": "Which hybridization does the carbon of CO2 have?",
              "Correct Answer": "sp", "Incorrect Answer 1": "sp2", "Incorrect Answer 2": "sp3",
              "Incorrect Answer 3": "sp3d"}
GPQA_BRACKET = {"Record ID": "parity-2", "Question": "Which hybridization fits a square planar nickel complex?",
                "Correct Answer": "dsp2 [square planar]", "Incorrect Answer 1": "sp2", "Incorrect Answer 2": "sp3",
                "Incorrect Answer 3": "sp"}


def gpqa_cases() -> list[Case]:
    def case(output_for, record: dict[str, Any] = GPQA_ORDER, **kwargs: Any) -> Case:
        """``output_for(letter_of, gold)`` writes the output once the item's answer order is known."""
        return Case("gpqa", dict(record), output_for, **kwargs)

    bracket = "the fork (0.4.9.1) deletes the [...] note from the answer text shown"
    return [
        case(lambda letter, gold: f"The correct option is {gold}."),
        case(lambda letter, gold: f"The answer is {gold}."),
        case(lambda letter, gold: f"The answer is {letter['sp3']}."),
        case(lambda letter, gold: "Its hybridization is sp."),
        case(lambda letter, gold: f"Final choice: {letter['sp3'][1]}"),
        case(lambda letter, gold: ""),
        case(lambda letter, gold: "I am not sure"),
        # With "sp" listed before "sp2", the fork's alternation takes "sp" inside "sp2"; 0.4.13 takes "sp2".
        case(lambda letter, gold: "Its hybridization is sp2 here", differs={"exact_match,flexible-extract": 1.0},
             choice_order_needed=lambda choices: choices.index("sp") < choices.index("sp2")),
        case(lambda letter, gold: f"The answer is {gold}.", GPQA_BRACKET, prompt_differs=bracket),
        # Only the fork's choices hold the bare "dsp2"; 0.4.13's hold "dsp2 square planar" and it finds "sp2" inside.
        case(lambda letter, gold: "It looks dsp2 to me", GPQA_BRACKET, prompt_differs=bracket,
             differs={"exact_match,flexible-extract": 1.0}),
    ]


def all_cases() -> list[Case]:
    """Every case with a unique "(case N)" tag in its question, by which the scripted model finds its output."""
    cases = gsm8k_cases() + arc_cases() + math_cases() + mmlu_pro_cases() + gpqa_cases()
    tagged = []
    for number, case in enumerate(cases):
        record = dict(case.record)
        key = {"gsm8k": "question", "arc_challenge": "question", "math": "problem", "mmlu_pro": "question",
               "gpqa": "Question"}[case.task]
        question = record[key]
        record[key] = f"{question} (case {number})"
        if case.choice_order_needed:  # the order follows the question's hash: pad it until the order fits
            padding = 1
            while not case.choice_order_needed([c.strip() for c in with_choices(record)["choices"]]):
                record[key] = f"{question}{' ' * padding} (case {number})"
                padding += 1
        if case.task == "mmlu_pro":
            record["question_id"] = number
        output = case.output
        if callable(output):
            doc = with_choices(record)
            letter = {text.strip(): f"({'ABCD'[i]})" for i, text in enumerate(doc["choices"])}
            output = output(letter, doc["answer"])
        tagged.append(replace(case, record=record, output=output))
    return tagged


HARNESS_TASKS: dict[str, Task] = {"gsm8k": GSM8K(), "arc_challenge": ARCChallenge(), "math": HendrycksMath(),
                                  "mmlu_pro": MMLUPro(), "gpqa": GPQA()}


# ---------------------------------------------------------------------------------------------- lm-eval side
def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def local_task_yaml(name: str, include: Path, data: Path, split: str, extra: str = "") -> str:
    return textwrap.dedent(f"""\
        include: {include}
        task: {name}
        tag: []
        dataset_path: json
        dataset_name: null
        dataset_kwargs:
          data_files:
            {split}: {data}
        training_split: null
        validation_split: null
        test_split: {split}
        fewshot_split: null
        num_fewshot: 0
        """) + extra


GPQA_DOCS = '''\
from lm_eval.tasks.gpqa.generative.utils import preprocess  # 0.4.13's cleaning of the answer texts
from tasks.gpqa import ANSWER_FIELDS, choice_order  # the harness's fixed per-item order


def process_docs(dataset):
    def one(doc):
        answers = [preprocess(doc[f]) for f in ANSWER_FIELDS]
        choices = [answers[i] for i in choice_order(doc["Question"])]
        gold = choices.index(answers[3])
        return {**{f"choice{i + 1}": c for i, c in enumerate(choices)}, "choices": choices,
                "answer": "(" + "ABCD"[gold] + ")"}

    return dataset.map(one)
'''

# The fork's GSM8K doc_to_text, as its YAML spells it (single quotes: the first \\n stays a backslash and an n).
FORK_GSM8K_TEXT = ("doc_to_text: 'Solve the following math problem. You need to think step-by-step, show your detailed "
                   "reasoning, and end with \"The answer is [result],\" where [result] is the answer you get.\\nQ: "
                   "{{question}}\n\n  A:'\n")
FORK_GPQA_DESCRIPTION = ('description: "Answer the following multiple-choice question. Your response should be the '
                         'letter of the correct option, enclosed in parentheses ((A), (B), (C), or (D)).\\n"\n')


def write_lm_eval_tasks(folder: Path, cases: list[Case]) -> list[str]:
    """One local lm-eval task per (task, subject) present in the cases; returns their names."""
    names = []

    def add(name: str, include: Path, records: list[dict[str, Any]], split: str = "test", extra: str = "") -> None:
        data = folder / f"{name}.jsonl"
        write_jsonl(data, records)
        (folder / f"{name}.yaml").write_text(local_task_yaml(name, include, data, split, extra), encoding="utf-8")
        names.append(name)

    by_task: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        by_task.setdefault(case.task, []).append(case.record)
    add("p_gsm8k", BUILTIN / "gsm8k" / "gsm8k-cot.yaml", by_task["gsm8k"], extra=FORK_GSM8K_TEXT)
    add("p_arc", BUILTIN / "arc" / "arc_challenge_chat.yaml", by_task["arc_challenge"])
    for subject in sorted({r["category"] for r in by_task["mmlu_pro"]}):
        slug = subject.replace(" ", "_")
        add(f"p_mmlu_pro_{slug}", BUILTIN / "mmlu_pro" / f"mmlu_pro_{slug}.yaml",
            [r for r in by_task["mmlu_pro"] if r["category"] == subject])
    lm_eval_math = {"counting_and_probability": "counting_and_prob", "number_theory": "num_theory",
                    "precalculus": "precalc"}
    for kind, config in MATH_SUBJECTS.items():
        records = [r for r in by_task["math"] if r["type"] == kind]
        if records:
            add(f"p_math_{config}", BUILTIN / "minerva_math" / f"minerva_math_{lm_eval_math.get(config, config)}.yaml",
                records)
    (folder / "p_gpqa_docs.py").write_text(GPQA_DOCS, encoding="utf-8")
    add("p_gpqa", BUILTIN / "gpqa" / "generative" / "gpqa_main_generative_n_shot.yaml", by_task["gpqa"],
        split="train", extra=FORK_GPQA_DESCRIPTION + "process_docs: !function p_gpqa_docs.process_docs\n"
                                                     "validation_split: train\ntest_split: null\n")
    return names


class ScriptedLM(LM):
    """Answers each request with its case's output, found by the case tag in the context."""

    tokenizer_name = "parity-chat-template"

    def __init__(self, cases: list[Case]):
        super().__init__()
        self.cases = cases
        self.requests: dict[int, tuple[str, dict[str, Any]]] = {}

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return render(chat_history, add_generation_prompt)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        outputs = []
        for request in requests:
            context, gen_kwargs = request.args
            (number,) = {int(n) for n in TAG.findall(context)}
            self.requests[number] = (context, gen_kwargs)
            outputs.append(self.cases[number].output)
        return outputs

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError


@dataclass
class LmEvalRun:
    cases: list[Case]
    lm: ScriptedLM
    scores: dict[int, dict[str, float]]  # case number -> "metric,filter" -> score
    extracted: dict[int, dict[str, str]]  # case number -> filter -> filtered answer
    targets: dict[int, str]


@pytest.fixture(scope="module")
def lm_eval_run(tmp_path_factory) -> LmEvalRun:
    """lm-eval over every case, once per module (indexing only our folder, so the TaskManager is instant)."""
    folder = tmp_path_factory.mktemp("lm_eval_tasks")
    cases = all_cases()
    names = write_lm_eval_tasks(folder, cases)
    lm = ScriptedLM(cases)
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    result = lm_eval.simple_evaluate(model=lm, tasks=names, task_manager=manager, num_fewshot=0,
                                     apply_chat_template=True, log_samples=True, bootstrap_iters=0)
    scores: dict[int, dict[str, float]] = {}
    extracted: dict[int, dict[str, str]] = {}
    targets: dict[int, str] = {}
    for samples in result["samples"].values():
        for sample in samples:
            (number,) = {int(n) for n in TAG.findall(sample["arguments"][0][0])}
            for metric in sample["metrics"]:
                scores.setdefault(number, {})[f"{metric},{sample['filter']}"] = float(sample[metric])
            extracted.setdefault(number, {})[sample["filter"]] = sample["filtered_resps"][0]
            targets[number] = str(sample["target"])
    return LmEvalRun(cases, lm, scores, extracted, targets)


def harness_scores(case: Case):
    task = HARNESS_TASKS[case.task]
    (doc,) = task.docs([case.record])
    (score,) = task.score([doc], [case.output])
    return task.prompt(doc), score


# ------------------------------------------------------------------------------------------------------ tests
def test_every_case_reached_lm_eval(lm_eval_run):
    assert sorted(lm_eval_run.lm.requests) == list(range(len(lm_eval_run.cases)))
    assert sorted(lm_eval_run.scores) == list(range(len(lm_eval_run.cases)))


def test_gpqa_cases_have_the_choice_order_they_need():
    needing = [case for case in all_cases() if case.choice_order_needed]
    assert needing
    for case in needing:
        assert case.choice_order_needed([c.strip() for c in with_choices(case.record)["choices"]])


@pytest.mark.parametrize("number", range(len(all_cases())))
def test_scores_match_lm_eval(lm_eval_run, number):
    case = lm_eval_run.cases[number]
    _, ours = harness_scores(case)
    theirs = lm_eval_run.scores[number]
    assert set(ours.scores) == set(theirs), f"metric names differ: {sorted(ours.scores)} vs {sorted(theirs)}"
    for metric, value in ours.scores.items():
        if metric in case.differs:
            assert value == case.differs[metric], f"{metric}: harness (fork) score"
            assert theirs[metric] != value, f"{metric}: declared as a 0.4.13 difference but lm-eval agrees"
        else:
            assert value == theirs[metric], f"{metric}: harness {value} vs lm-eval {theirs[metric]}"


@pytest.mark.parametrize("number", range(len(all_cases())))
def test_prompt_stops_target_and_extraction_match_lm_eval(lm_eval_run, number):
    case = lm_eval_run.cases[number]
    prompt, ours = harness_scores(case)
    context, gen_kwargs = lm_eval_run.lm.requests[number]
    assert list(prompt.stop) == list(gen_kwargs["until"])
    if case.prompt_differs:
        assert render_prompt(prompt) != context, f"declared prompt difference not seen: {case.prompt_differs}"
    else:
        assert render_prompt(prompt) == context
    assert (ours.target == lm_eval_run.targets[number]) != case.target_differs
    if case.task != "math":
        for name, answer in ours.extracted.items():
            theirs = lm_eval_run.extracted[number][name]
            if f"exact_match,{name}" in case.differs:
                assert answer != theirs
            else:
                assert answer == theirs
