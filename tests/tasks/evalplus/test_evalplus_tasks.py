"""HumanEval+ and MBPP+: data routes, prompts, the sandbox round trip of outputs, and verdicts checked against
evalplus 0.3.1 itself.

evalplus reads HUMANEVAL_OVERRIDE_PATH / MBPP_OVERRIDE_PATH and its cache folder when first imported, so every test
that runs evalplus's own loaders or checker does it in a subprocess with its own environment: nothing leaks into
this process or the user's ~/.cache/evalplus. The fixture problems (tasks/fixtures/*_plus.jsonl) are written for
these tests in evalplus's release format; "Mbpp/2" takes that real task's id because evalplus converts MBPP+
inputs by task number (its lists become tuples) and picks its set-comparison oracle by the entry point's name.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tasks.evalplus.child as child
from tasks.base import Doc
from tasks.code import first_python_block
from tasks.records import FIXTURES, DataError
from tasks.evalplus.output_compare import check_set
from tasks.evalplus.releases import HUMANEVAL_PLUS, MBPP_PLUS, load_local_copy, mbpp_tests, mbpp_text, problem
from tasks.evalplus.solution_runs import Call, SetRun, set_budget, time_limits
from tasks.evalplus.groundtruth import ground_truth
from tasks.evalplus.plus_tasks import BASE, PLUS, HumanEvalPlus, MBPPPlus
from tasks.evalplus.values import DictView, Opaque, PayloadError, decode
from tasks.humaneval import HumanEval
from tasks.humaneval import candidate as humaneval_candidate
from tasks.mbpp import MBPP
from tasks.registry import make_task, task_names

REPO = Path(__file__).resolve().parents[3]

# (task, label, the model's answer, passes base, passes plus) -- the harness's verdicts; evalplus 0.3.1 must give
# the same, except on find_zero (see EVALPLUS_0_3_1_FIND_ZERO_BUG).
NEWTON = """\
    x = 10.0
    for _ in range(200):
        fx = poly(xs, x)
        if abs(fx) < 1e-12:
            break
        x -= fx / sum(i * c * math.pow(x, i - 1) for i, c in enumerate(xs) if i)
    return x
```"""
CASES: list[tuple[str, str, str, bool, bool]] = [
    ("humaneval_plus", "mean exact", "    return sum(numbers) / len(numbers)\n```", True, True),
    ("humaneval_plus", "mean fsum, within atol", "    import math\n    return math.fsum(numbers) / len(numbers)\n```",
     True, True),
    ("humaneval_plus", "mean rounded", "    return round(sum(numbers) / len(numbers), 2)\n```", True, False),
    ("humaneval_plus", "mean printing a lot", "    for _ in range(1000):\n        print('x' * 1000)\n"
     "    return sum(numbers) / len(numbers)\n```", True, True),
    ("humaneval_plus", "mean floor division", "    return sum(numbers) // len(numbers)\n```", False, False),
    ("humaneval_plus", "find_zero newton, another zero", NEWTON, True, True),
    ("humaneval_plus", "find_zero wrong", "    return 0.0\n```", False, False),
    ("humaneval_plus", "fib iterative",
     "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a", True, True),
    ("humaneval_plus", "fib naive, slow",
     "    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n```", True, False),
    ("humaneval_plus", "fib memo, too deep",
     "    memo = {0: 0, 1: 1}\n\n    def go(k):\n        if k not in memo:\n"
     "            memo[k] = go(k - 1) + go(k - 2)\n        return memo[k]\n    return go(n)\n```", True, False),
    ("humaneval_plus", "max accumulate",
     "    from itertools import accumulate\n    return list(accumulate(numbers, max))\n```", True, True),
    ("humaneval_plus", "max fails on []",
     "    best = numbers[0]\n    result = []\n    for n in numbers:\n        best = max(best, n)\n"
     "        result.append(best)\n    return result\n```", True, False),
    ("humaneval_plus", "max as tuple",
     "    from itertools import accumulate\n    return tuple(accumulate(numbers, max))", False, False),
    ("humaneval_plus", "max as generator", "    return (max(numbers[:i + 1]) for i in range(len(numbers)))\n```",
     False, False),
    ("mbpp_plus", "similar list, set oracle", "def similar_elements(test_tup1, test_tup2):\n"
     "    return [x for x in test_tup1 if x in test_tup2]", True, True),
    ("mbpp_plus", "similar generator", "def similar_elements(a, b):\n    return (x for x in set(a) if x in b)",
     True, True),
    ("mbpp_plus", "similar union", "def similar_elements(a, b):\n    return tuple(set(a) | set(b))", False, False),
    ("mbpp_plus", "sphere unrolled, fenced", "Here:\n```python\nimport math\ndef sphere_volume(r):\n"
     "    return 4 / 3 * math.pi * r * r * r\n```\nDone.", True, True),
    ("mbpp_plus", "sphere with pi 3.14", "def sphere_volume(r):\n    return 4 / 3 * 3.14 * r ** 3", False, False),
    ("mbpp_plus", "sphere rounded", "import math\ndef sphere_volume(r):\n    return round(4 / 3 * math.pi * r ** 3, 2)",
     True, False),
    ("mbpp_plus", "text bool", "import re\ndef text_starta_endb(text):\n    return bool(re.search(r'a.*?b$', text))",
     True, True),
    ("mbpp_plus", "text anchored match", "import re\ndef text_starta_endb(text):\n    return re.match(r'a.*b$', text)",
     True, False),
    ("mbpp_plus", "text messages", "import re\ndef text_starta_endb(text):\n"
     "    return 'Found a match!' if re.search(r'a.*?b$', text) else 'Not matched!'", False, False),
    ("mbpp_plus", "primes naive, slow", "def count_primes(n):\n"
     "    return sum(1 for k in range(2, n) if all(k % d for d in range(2, k)))", True, False),
    ("mbpp_plus", "primes off by one", "def count_primes(n):\n"
     "    return sum(1 for k in range(2, n + 1) if all(k % d for d in range(2, int(k ** 0.5) + 1)))", True, False),
    ("mbpp_plus", "syntax error", "def count_primes(n):\n    return n +", False, False),
    ("mbpp_plus", "wrong name", "def prime_count(n):\n    return 0", False, False),
    ("mbpp_plus", "sys.exit", "import sys\ndef count_primes(n):\n    sys.exit(0)", False, False),
    ("mbpp_plus", "os._exit", "import os\ndef count_primes(n):\n    os._exit(0)", False, False),
]
# evalplus 0.3.1's find_zero oracle `continue`s before recording the pass, so it fails every solution; the harness
# follows upstream's fix (tasks/evalplus/output_compare.py). The only expected difference from evalplus.
EVALPLUS_0_3_1_FIND_ZERO_BUG = {"find_zero newton, another zero": (False, False)}

# Outputs compared directly, without a task: (dataset, entry point, outputs, expected, atol, passes). The outputs
# are Python source evaluated after PRELUDE, here and inside evalplus's own checker.
PRELUDE = "import collections, re\nimport numpy as np\nP = collections.namedtuple('P', 'a b')\n"
COMPARISONS: list[tuple[str, str, str, str, float, bool]] = [
    ("humaneval", "f", "[0.1 + 0.2]", "[0.3]", 0, True),  # atol 1e-6 enforced for floats
    ("humaneval", "f", "[1.001]", "[1.0]", 0, False),
    ("humaneval", "f", "[1.5, (1, 2.0000001)]", "[1.5, (1, 2)]", 0, True),  # the raised atol carries over
    ("humaneval", "f", "[(1, 2.0000001)]", "[(1, 2)]", 0, False),
    ("humaneval", "f", "[2]", "[2.0]", 0, True),
    ("humaneval", "f", "[2]", "[2.5]", 0, False),
    ("humaneval", "f", "[(1, 2)]", "[[1, 2]]", 0, False),
    ("humaneval", "f", "[float('nan')]", "[float('nan')]", 0, False),
    ("humaneval", "f", "[1.005]", "[1.0]", 0.01, True),
    ("humaneval", "f", "[[1.0, 2.0000001]]", "[[1.0, 2.0]]", 0, True),
    ("humaneval", "f", "[np.float64(0.3)]", "[0.1 + 0.2]", 0, False),  # not exact, and not a float by type
    ("humaneval", "f", "[np.float64(0.5)]", "[0.5]", 0, True),
    ("humaneval", "f", "[np.array([1.0, 2.0])]", "[[1.0, 2.0]]", 0, False),  # `not array` raises
    ("humaneval", "f", "[P(1, 2)]", "[(1, 2)]", 0, True),
    ("humaneval", "f", "[P(1.0, 2.0000001)]", "[(1.0, 2.0)]", 0, False),  # allclose needs the same type
    ("humaneval", "f", "[collections.Counter(a=2)]", "[{'a': 2}]", 0, True),
    ("humaneval", "f", "[{1: 0, 2: 0}.keys()]", "[{1, 2}]", 0, True),
    ("humaneval", "f", "[(x for x in [1, 2])]", "[[1, 2]]", 0, False),
    ("humaneval", "f", "[2 ** 20000]", "[2 ** 20000]", 0, True),
    ("humaneval", "f", "[2 ** 20000 + 1]", "[2 ** 20000]", 0, False),
    ("humaneval", "f", "[True]", "[1]", 0, True),
    ("humaneval", "f", "[1 + 2.0000001j]", "[1 + 2j]", 0, False),
    ("humaneval", "f", "[b'ab', bytearray(b'ab')]", "[b'ab', b'ab']", 0, True),
    ("mbpp", "similar_elements", "[(x for x in [2, 1])]", "[(1, 2)]", 0, True),
    ("mbpp", "check_str", "['yes', None, re.match('a', 'a')]", "[True, False, True]", 0, True),
    ("mbpp", "check_str", "[True, 'no']", "[True, False]", 0, False),
    ("mbpp", "sum_div", "[0]", "[5]", 0, True),
]

EVALPLUS_SCRIPT = textwrap.dedent("""
    import json, sys
    from evalplus.data import get_human_eval_plus, get_human_eval_plus_hash, get_mbpp_plus, get_mbpp_plus_hash
    from evalplus.eval import untrusted_check
    from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
    from evalplus.evaluate import check_correctness, get_groundtruth

    request = json.load(sys.stdin)
    data = {"humaneval": (get_human_eval_plus(), get_human_eval_plus_hash(), []),
            "mbpp": (get_mbpp_plus(), get_mbpp_plus_hash(), MBPP_OUTPUT_NOT_NONE_TASKS)}
    truth = {name: get_groundtruth(problems, digest, not_none) for name, (problems, digest, not_none) in data.items()}
    solutions = []
    for dataset, task_id, solution in request["solutions"]:
        result = check_correctness(dataset, 0, data[dataset][0][task_id], solution, truth[dataset][task_id],
                                   fast_check=True)  # evalplus's evaluate() default
        solutions.append([result["base"][0], result["plus"][0]])
    comparisons = []
    for dataset, entry_point, prelude, outputs, expected, atol in request["comparisons"]:
        scope = {}
        exec(prelude, scope)
        expected = eval(expected, scope)
        code = f"{prelude}\\nOUT = {outputs}\\ndef {entry_point}(i):\\n    return OUT[i]\\n"
        status, _ = untrusted_check(dataset, code, [[i] for i in range(len(expected))], entry_point, expected,
                                    atol, [0.001] * len(expected), fast_check=True)
        comparisons.append(status)
    print("RESULT " + json.dumps({"solutions": solutions, "comparisons": comparisons}))
""")


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A subprocess environment with its own evalplus cache, no override variables and no reachable network."""
    env = {k: v for k, v in os.environ.items() if k not in ("HUMANEVAL_OVERRIDE_PATH", "MBPP_OVERRIDE_PATH")}
    proxy = "http://127.0.0.1:9"  # the discard port: a download attempt fails at once, even on a networked machine
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), http_proxy=proxy, https_proxy=proxy, HTTP_PROXY=proxy,
               HTTPS_PROXY=proxy, no_proxy="", NO_PROXY="", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               PYTHONPATH=str(REPO), **extra)
    return env


def start_python(script: str, env: dict[str, str], cwd: Path, stdin: str = "") -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    process.stdin.write(stdin)
    process.stdin.close()
    return process


def finish(process: subprocess.Popen, timeout: float = 90) -> str:
    out, err = process.stdout.read(), process.stderr.read()
    assert process.wait(timeout) == 0, err[-2000:]
    return out


def fixture_docs(task) -> list[Doc]:
    return task.docs(task.load("fixtures", None).records)


def doc_for(task, label: str) -> Doc:
    """The fixture problem a case is about, by its entry point's name in the answer or the case label."""
    names = {"mean": "mean_of", "find_zero": "find_zero", "fib": "fib", "max": "running_max",
             "similar": "similar_elements", "sphere": "sphere_volume", "text": "text_starta_endb",
             "primes": "count_primes", "syntax": "count_primes", "wrong name": "count_primes",
             "sys.exit": "count_primes", "os._exit": "count_primes"}
    entry = next(v for k, v in names.items() if label.startswith(k))
    return next(d for d in fixture_docs(task) if d.data["entry_point"] == entry)


# ---------------------------------------------------------------- registry, data, prompts

def test_registry_has_both_tasks_with_plus_as_primary():
    for name, cls in (("humaneval_plus", HumanEvalPlus), ("mbpp_plus", MBPPPlus)):
        assert name in task_names()
        task = make_task(name)
        assert isinstance(task, cls) and task.name == name
        assert task.primary_metric == PLUS == task.metrics[0] and task.metrics == (PLUS, BASE)
        assert task.describe()["dataset"] == task.dataset.hub_id
    assert task_names()[:7] == ["mmlu_pro", "arc_challenge", "gsm8k", "math", "gpqa", "humaneval", "mbpp"]


@pytest.mark.parametrize("task", [HumanEvalPlus(), MBPPPlus()], ids=lambda t: t.name)
def test_fixtures_load_deterministically_with_unique_ids(task):
    data = task.load("fixtures", None)
    assert data.source == "fixtures" and len(data.records) == 4
    docs = task.docs(data.records)
    assert [d.id for d in docs] == [r["task_id"] for r in data.records] and len({d.id for d in docs}) == 4
    assert task.docs(task.load("fixtures", None).records) == docs


def test_humaneval_plus_prompt_and_extraction_are_the_paper_tasks():
    task, paper = HumanEvalPlus(), HumanEval()
    for doc in fixture_docs(task):
        as_humaneval = Doc(doc.id, {"task_id": doc.id, "prompt": doc.data["prompt"], "test": "",
                                    "entry_point": doc.data["entry_point"]})
        assert task.prompt(doc) == paper.prompt(as_humaneval)
        assert task.prompt(doc).prefill == "```python\n" and task.prompt(doc).stop == ("\nassert", "\n# Test")
        answer = "    return 1\n```\nprose"
        assert task.candidate(doc.data, answer) == humaneval_candidate(as_humaneval.data, answer)
    assert task.candidate(doc.data, "```") is None


def test_mbpp_plus_prompt_is_the_paper_template_with_the_docstring_and_asserts():
    task = MBPPPlus()
    doc = next(d for d in fixture_docs(task) if d.id == "Mbpp/9001")
    assert mbpp_text(doc.data) == "Write a function to compute the volume of a sphere of radius r."
    tests = mbpp_tests(doc.data)
    assert tests == [f"assert math.isclose(sphere_volume({r}), {(4.0 / 3.0) * math.pi * r ** 3!r}, rel_tol=0.001)"
                     for r in (10, 25, 20)]  # without the assertion field's `import math`
    expected = MBPP().prompt(Doc("x", {"text": mbpp_text(doc.data), "test_list": tests}))
    assert task.prompt(doc) == expected and expected.stop == ("[DONE]",)
    assert "volume of a sphere of radius r.\n\nDirectly after" in expected.user
    assert expected.user.endswith(tests[2] + "\n[BEGIN]\n")
    answer = "Sure.\n```python\ndef f():\n    return 1\n```"
    assert task.candidate(doc.data, answer) == first_python_block(answer) == "def f():\n    return 1"
    assert task.candidate(doc.data, "  \n") is None


def test_mbpp_plus_inputs_are_converted_once_as_evalplus_does():
    record = next(d.data for d in fixture_docs(MBPPPlus()) if d.id == "Mbpp/2")
    converted = problem(MBPP_PLUS, record)
    assert converted.base_inputs[0] == [(3, 4, 5, 6), (5, 7, 4, 10)]
    assert isinstance(record["base_input"][0][0], list)  # the record keeps the file's JSON form
    assert converted.key == problem(MBPP_PLUS, json.loads(json.dumps(record))).key
    assert converted.key != problem(MBPP_PLUS, {**record, "plus_input": [[[1], [1]]]}).key


@pytest.mark.parametrize("release", [HUMANEVAL_PLUS, MBPP_PLUS], ids=lambda r: r.dataset)
def test_data_dir_takes_the_release_asset_gzipped_or_not(tmp_path, release):
    lines = (FIXTURES / release.spec.fixture).read_text(encoding="utf-8")
    gz = tmp_path / "gz" / release.spec.local_file
    gz.parent.mkdir(parents=True)
    with gzip.open(gz, "wt", encoding="utf-8") as handle:
        handle.write(lines)
    plain = tmp_path / "plain" / release.spec.local_file.removesuffix(".gz")
    plain.parent.mkdir(parents=True)
    plain.write_text(lines, encoding="utf-8")
    for folder, path in ((tmp_path / "gz", gz), (tmp_path / "plain", plain)):
        data = load_local_copy(release, folder)
        assert (data.source, data.location) == ("local", str(path)) and len(data.records) == 4
    with pytest.raises(DataError) as error:
        load_local_copy(release, tmp_path)
    message = str(error.value)
    assert "\n" not in message and release.spec.local_file in message and release.override_env in message


@pytest.mark.parametrize("release, field, value, words", [
    (HUMANEVAL_PLUS, "atol", -1, "field 'atol'"),
    (HUMANEVAL_PLUS, "entry_point", "not a name", "field 'entry_point'"),
    (HUMANEVAL_PLUS, "plus_input", [1, 2], "field 'plus_input'"),
    (MBPP_PLUS, "task_id", "Mbpp/two", "field 'task_id'"),
    (MBPP_PLUS, "assertion", "x = 1", "field 'assertion'"),
], ids=lambda v: str(v)[:20])
def test_a_bad_record_fails_with_its_file_line_and_field(tmp_path, release, field, value, words):
    records = [json.loads(line) for line in (FIXTURES / release.spec.fixture).read_text().splitlines()]
    records[1][field] = value
    path = tmp_path / release.spec.local_file.removesuffix(".gz")
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(DataError, match=f"^{path}:2: {words}"):
        load_local_copy(release, tmp_path)


LOAD_SCRIPT = textwrap.dedent("""
    import json
    from tasks.records import DataError
    from tasks.evalplus.plus_tasks import HumanEvalPlus, MBPPPlus
    out = {}
    for task in (HumanEvalPlus(), MBPPPlus()):
        for source in ("hub", "auto"):
            try:
                data = task.load(source, None)
                out[f"{task.name} {source}"] = [data.source, data.location, len(data.records)]
            except DataError as error:
                out[f"{task.name} {source}"] = ["error", str(error)]
    print("RESULT " + json.dumps(out))
""")


def load_in_subprocess(tmp_path: Path, **env: str) -> dict[str, Any]:
    out = finish(start_python(LOAD_SCRIPT, offline_env(tmp_path, **env), tmp_path))
    return json.loads(out.split("RESULT ", 1)[1])


def test_without_data_or_network_the_hub_route_says_how_to_provide_the_files(tmp_path):
    result = load_in_subprocess(tmp_path)
    for task, release in (("humaneval_plus", HUMANEVAL_PLUS), ("mbpp_plus", MBPP_PLUS)):
        kind, message = result[f"{task} hub"]
        assert kind == "error" and "\n" not in message
        for words in (f"cannot get {release.title} {release.version}", release.url, "--data-dir",
                      release.spec.local_file, release.override_env):
            assert words in message
        assert result[f"{task} auto"] == ["fixtures", f"fixtures/{release.spec.fixture}", 4]
    assert not any((tmp_path / "cache" / "evalplus").glob("*.jsonl"))  # no partial download left behind


def test_the_override_variables_feed_evalplus_own_loader(tmp_path):
    paths = {name: str(FIXTURES / name) for name in ("humaneval_plus.jsonl", "mbpp_plus.jsonl")}
    result = load_in_subprocess(tmp_path, HUMANEVAL_OVERRIDE_PATH=paths["humaneval_plus.jsonl"],
                                MBPP_OVERRIDE_PATH=paths["mbpp_plus.jsonl"])
    for task, name in (("humaneval_plus", "humaneval_plus.jsonl"), ("mbpp_plus", "mbpp_plus.jsonl")):
        assert result[f"{task} hub"] == result[f"{task} auto"] == ["local", paths[name], 4]


# ---------------------------------------------------------------- outputs across the sandbox boundary

def round_trip(value: Any) -> Any:
    return decode(json.loads(json.dumps(child.encode_output(value))))


def test_outputs_keep_what_comparison_needs_across_the_boundary():
    import collections
    import itertools

    assert round_trip(2 ** 20000) == 2 ** 20000 and round_trip(-(2 ** 5000)) == -(2 ** 5000)
    assert math.isnan(round_trip(float("nan"))) and math.copysign(1, round_trip(-0.0)) == -1
    assert round_trip(float("inf")) == float("inf") and round_trip(1 + 2j) == 1 + 2j
    nested = {(1, "a"): [1.5, {2, 3}, frozenset({4})], "k": (b"\x00\xff", bytearray(b"z"), None, True)}
    assert round_trip(nested) == nested
    assert [type(x) for x in round_trip(nested)[(1, "a")]] == [float, set, frozenset]
    assert type(round_trip((1, 2))) is tuple and type(round_trip([1, 2])) is list and round_trip(True) is True
    point = collections.namedtuple("Point", "x y")(1, 2)
    for value, base in ((point, tuple), (collections.Counter("aab"), dict), (collections.OrderedDict(a=1), dict)):
        decoded = round_trip(value)
        assert decoded == value and isinstance(decoded, base) and type(decoded) is not base
    assert type(round_trip(np.float64(0.25))) is np.float64 and round_trip(np.int8(-3)) == np.int8(-3)
    array = round_trip(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert array.dtype == np.float32 and array.shape == (2, 3) and array[1, 2] == 5.0
    view = round_trip({1: "a", 2: "b"}.keys())
    assert isinstance(view, DictView) and view == {1, 2}
    listed = round_trip(x * 2 for x in range(3))
    assert isinstance(listed, Opaque) and list(listed) == [0, 2, 4] and listed != [0, 2, 4] and listed is not None
    for unlisted in (itertools.count(), lambda: 1):  # endless, or not iterable
        opaque = round_trip(unlisted)
        assert isinstance(opaque, Opaque) and opaque.items is None
        with pytest.raises(TypeError):
            set(opaque)
    for no_numeric_dtype in (np.array(["s"]), np.array([1], dtype=object)):
        opaque = round_trip(no_numeric_dtype)
        assert isinstance(opaque, Opaque) and opaque.type_name == "numpy.ndarray" and opaque != no_numeric_dtype
    deep: list = []
    for _ in range(child.MAX_DEPTH + 10):
        deep = [deep]
    assert isinstance(round_trip(deep), Opaque)


@pytest.mark.parametrize("tree", [["nope", 1], ["ndarray", "O", [1], [["list", [1]]]], ["np", "<U3", "abc"],
                                  ["int", "zz"], ["dict", [[["list", []], 1]]], ["bytes", "***"], {"a": 1}, [],
                                  ["sub", "x", True], ["ndarray", "<f8", [5], ["list", [1.0]]]])
def test_a_malformed_output_is_refused_not_built(tree):
    with pytest.raises(PayloadError):
        decode(tree)


def test_time_limits_and_budget_follow_evalplus():
    assert time_limits([0.0001, 0.5]) == (1.0, 2.0)
    assert set_budget((1.0, 2.0)) == 5.0 and set_budget((1.0,) * 100) == 62.0


def test_a_run_that_stopped_early_or_crashed_is_not_a_pass():
    ok = Call("ok", 1, 0.0)
    assert check_set("humaneval", "f", [[0], [1]], SetRun("ran", (ok, ok)), [1, 1], 0).passed
    assert check_set("humaneval", "f", [[0], [1]], SetRun("ran", (ok,)), [1, 1], 0).status == "error"
    assert check_set("humaneval", "f", [[0]], SetRun("memory", detail="MemoryError"), [1], 0).status == "memory"
    assert check_set("humaneval", "f", [[0]], SetRun("ran", (), "NameError: x"), [1], 0).status == "error"
    timed = SetRun("ran", (ok, Call("timeout", "InputTimeout: timed out", 1.0)))
    verdict = check_set("humaneval", "f", [[0], [1]], timed, [1, 1], 0)
    assert verdict.status == "timeout" and verdict.detail.startswith("input 2 of 2")
    assert check_set("humaneval", "f", [[0]], SetRun("ran", (Call("ok", ["bad"], 0.0),)), [1], 0).status == "failed"


# ---------------------------------------------------------------- verdicts against evalplus itself

@pytest.fixture(scope="module")
def evalplus_verdicts(tmp_path_factory):
    """evalplus's own check_correctness on every case and untrusted_check on every comparison, started first so it
    runs while the harness scores."""
    tmp_path = tmp_path_factory.mktemp("evalplus")
    solutions = []
    for name, label, answer, _, _ in CASES:
        task = make_task(name)
        doc = doc_for(task, label)
        solutions.append([task.release.dataset, doc.id, task.candidate(doc.data, answer)])
    request = {"solutions": solutions,
               "comparisons": [[d, e, PRELUDE, o, x, a] for d, e, o, x, a, _ in COMPARISONS]}
    env = offline_env(tmp_path, HUMANEVAL_OVERRIDE_PATH=str(FIXTURES / "humaneval_plus.jsonl"),
                      MBPP_OVERRIDE_PATH=str(FIXTURES / "mbpp_plus.jsonl"))
    process = start_python(EVALPLUS_SCRIPT, env, tmp_path, json.dumps(request))
    yield functools.cache(lambda: json.loads(finish(process).split("RESULT ", 1)[1]))
    if process.poll() is None:
        process.kill()


def test_harness_verdicts_match_evalplus_check_correctness(evalplus_verdicts, tmp_path):
    cache = tmp_path / "truth"
    scores = {}
    for name in ("humaneval_plus", "mbpp_plus"):
        task = type(make_task(name))(cache_dir=cache)
        cases = [c for c in CASES if c[0] == name]
        results = task.score([doc_for(task, label) for _, label, _, _, _ in cases], [c[2] for c in cases])
        scores.update({label: score for (_, label, _, _, _), score in zip(cases, results)})
    theirs = evalplus_verdicts()["solutions"]
    mismatches = []
    for (name, label, _, base, plus), (their_base, their_plus) in zip(CASES, theirs):
        score = scores[label]
        ours = (score.scores[BASE] == 1.0, score.scores[PLUS] == 1.0)
        evalplus = (their_base == "pass", their_base == their_plus == "pass")
        if ours != (base, plus) or evalplus != EVALPLUS_0_3_1_FIND_ZERO_BUG.get(label, (base, plus)):
            mismatches.append(f"{label}: harness {ours} {score.diagnostics}, evalplus {their_base}/{their_plus}")
    assert not mismatches, "\n".join(mismatches)
    assert scores["fib naive, slow"].diagnostics["plus_status"] == "timeout"
    assert scores["primes naive, slow"].diagnostics["plus_status"] == "timeout"
    assert scores["max fails on []"].diagnostics["plus_detail"].startswith("input 1 of 4: IndexError")
    assert scores["mean rounded"].diagnostics["plus_detail"] == "input 2 of 4: expected 0.002, got 0.0"
    assert scores["syntax error"].diagnostics["base_status"] == "error"
    assert len(list(cache.glob("*.json.gz"))) == 8  # one expected-output entry per fixture problem


def test_output_comparison_matches_evalplus_unsafe_execute(evalplus_verdicts):
    theirs = evalplus_verdicts()["comparisons"]
    mismatches = []
    for (dataset, entry, outputs, expected, atol, passes), status in zip(COMPARISONS, theirs):
        scope: dict[str, Any] = {}
        exec(PRELUDE, scope)
        values, wanted = eval(outputs, scope), eval(expected, scope)
        run = SetRun("ran", tuple(Call("ok", json.loads(json.dumps(child.encode_output(v))), 0.0) for v in values))
        ours = check_set(dataset, entry, [[i] for i in range(len(values))], run, wanted, atol).passed
        if ours != passes or (status == "pass") != passes:
            mismatches.append(f"{dataset} {entry} {outputs} vs {expected}: harness {ours}, evalplus {status}")
    assert not mismatches, "\n".join(mismatches)


# ---------------------------------------------------------------- ground truth, readiness

def test_expected_outputs_are_cached_per_problem_and_reused(tmp_path, monkeypatch):
    import tasks.evalplus.groundtruth as groundtruth

    problems = [problem(MBPP_PLUS, d.data) for d in fixture_docs(MBPPPlus())][:2]
    first = ground_truth(problems, tmp_path)
    assert first[problems[0].key].outputs["base"] == [(4, 5), (3, 4), (13, 14)]
    assert len(first[problems[0].key].seconds["plus"]) == 3

    def no_runs(sets, *args, **kwargs):
        assert not sets, "expected outputs were recomputed although cached"
        return []

    monkeypatch.setattr(groundtruth, "run_sets", no_runs)
    assert ground_truth(problems, tmp_path) == first


def test_a_canonical_solution_that_fails_is_a_data_error(tmp_path):
    record = next(d.data for d in fixture_docs(HumanEvalPlus()) if d.data["entry_point"] == "running_max")
    broken = problem(HUMANEVAL_PLUS, {**record, "plus_input": [[[1]], ["not a list"]]})
    with pytest.raises(DataError, match=r"^HumanEvalPlusFixture/3: the canonical solution fails on plus input 2 of 2 "
                                        r"\(AssertionError: invalid inputs\)$"):
        ground_truth([broken], tmp_path)


def test_check_ready_runs_the_sandbox_canary():
    HumanEvalPlus().check_ready()
