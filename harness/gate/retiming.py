"""A speed figure that survives a shared, noisy runner: re-timing a finished run against a fixed reference decoder.

Noise model: on a shared CPU, other processes take time slices, so a timed stretch of work runs slower by a factor
that follows the machine's load and changes over seconds; a run's own tokens/s is one such stretch (two identical
runs here differed by 43%). ``run_eval.py gate-speed RUN`` decodes the first few stored prompts of every
(model, task) again, pass after pass, on the process's CPU time (slices taken by others are not counted), and runs a
fixed reference decoder (transformers and torch only, nothing this repository can change) before each prompt and
after the last. What CPU time still feels (shared caches, memory bandwidth, frequency, a hypervisor's steal) hits
prompt and reference alike, as they alternate within a fraction of a second: their ratio, tokens per CPU-second
times reference CPU-seconds ("normalised throughput"), cancels it, and the median over passes drops passes in which
a burst hit only one side. What remains is contention changing within one prompt and the two workloads' different
sensitivity to it; ``benchmarks/gate_speed_noise.py`` measures it (docs/benchmarks.md), and the gate's default
tolerance comes from there. The re-decoded ids are compared with the stored ones, so the measurement also says
whether the run reproduces.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from harness.errors import USAGE_ERROR, OneLineParser, UserError, one_line_failure
from harness.run.manifest import hardware
from harness.run.folder import RESULTS_NAME, Run, RunLoadError, load_run
from harness.run.records import ResultEntry

if TYPE_CHECKING:
    import torch

    from models.base import ModelAdapter, ModelConfig

FORMAT = "gate-speed-1"
REFERENCE_STEPS = 16  # greedy steps of one reference chunk (after a prefill of REFERENCE_PROMPT ids)
REFERENCE_PROMPT = 32


class SpeedError(UserError, ValueError):
    """Bad input to the speed measurement; the message is one line for the user."""


@dataclass(frozen=True)
class SpeedSettings:
    passes: int = 5  # timed passes; one untimed warm-up pass comes first
    samples: int = 2  # first N stored prompts of each (model, task)
    threads: int = 1
    device: str = "cpu"
    models: tuple[str, ...] | None = None
    tasks: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SpeedMeasure:
    """One (model, task): per-pass seconds of the prompts and of the reference chunks between them."""

    model: str
    task: str
    samples: int
    tokens_per_pass: int
    model_seconds: tuple[float, ...]
    reference_seconds: tuple[float, ...]
    reproduced: int  # prompts whose re-decoded ids equal the stored ones
    clock: str = "process_cpu"  # what model_seconds and reference_seconds count (see clock_for)
    pass_wall_seconds: tuple[float, ...] = ()  # each whole pass by the wall clock, for the record

    @property
    def normalized(self) -> tuple[float, ...]:
        return tuple(self.tokens_per_pass / m * r for m, r in zip(self.model_seconds, self.reference_seconds))

    @property
    def median_normalized(self) -> float:
        return statistics.median(self.normalized)

    @property
    def median_tokens_per_second(self) -> float:
        return self.tokens_per_pass / statistics.median(self.model_seconds)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "normalized": list(self.normalized), "median_normalized": self.median_normalized,
                "median_tokens_per_second": self.median_tokens_per_second}


class Reference:
    """A fixed greedy decoder: a seeded random Qwen3 the size of the tiny test models, stepped with its KV cache
    through transformers alone. It does the same kind of work as a decode (small matmuls, Python per step, cache
    growth), so contention slows both alike, and no change to this repository can alter it."""

    def __init__(self, device: "torch.device"):
        import torch
        from transformers import Qwen3Config, Qwen3ForCausalLM

        config = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                             initializer_range=0.2)
        with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
            torch.manual_seed(0)
            self.model = Qwen3ForCausalLM(config).to(device).eval()
        self.prompt = (torch.arange(REFERENCE_PROMPT, device=device) * 7 % 512).unsqueeze(0)

    def run(self) -> int:
        import torch

        from transformers import DynamicCache

        with torch.no_grad():
            cache = DynamicCache(config=self.model.config)
            logits = self.model(input_ids=self.prompt, cache=cache, use_cache=True, logits_to_keep=1).logits
            for _ in range(REFERENCE_STEPS):
                token = logits[:, -1:].argmax(-1)
                logits = self.model(input_ids=token, cache=cache, use_cache=True).logits
        return int(logits[0, -1].argmax())


def clock_for(device: "torch.device") -> Callable[[], float]:
    """The process's CPU time on a CPU (time other processes take from this one is not counted); wall time on an
    accelerator, whose work the CPU only waits for (the device is synchronised around every timed call)."""
    return time.process_time if device.type == "cpu" else time.perf_counter


def timed_on(device: "torch.device", clock: Callable[[], float], call: Callable[[], Any]) -> tuple[Any, float]:
    from harness.timing.clock import synchronize

    synchronize(device)
    start = clock()
    result = call()
    synchronize(device)
    return result, clock() - start


def measure(adapter: "ModelAdapter", config: "ModelConfig", prompts: Sequence[str],
            stored_ids: Sequence[Sequence[int]], canvas: int, passes: int, model: str, task: str) -> SpeedMeasure:
    """Warm-up pass, then ``passes`` timed passes; in each, a reference chunk before every prompt and after the last."""
    from models.base import GenerationRequest

    batches = [adapter.prepare([GenerationRequest(prompt=p, canvas_tokens=canvas)], config) for p in prompts]
    reference = Reference(adapter.device)
    clock = clock_for(adapter.device)
    results = [adapter.decode(b)[0] for b in batches]  # warm-up: loads weights, fills caches
    reference.run()
    tokens = sum(len(r.token_ids) for r in results)
    reproduced = sum(list(r.token_ids) == list(ids) for r, ids in zip(results, stored_ids))
    model_s, ref_s, wall_s = [], [], []
    for _ in range(passes):
        m = r = 0.0
        start = time.perf_counter()
        for batch in batches:
            r += timed_on(adapter.device, clock, reference.run)[1]
            m += timed_on(adapter.device, clock, lambda: adapter.decode(batch))[1]
        r += timed_on(adapter.device, clock, reference.run)[1]
        model_s.append(m)
        ref_s.append(r)
        wall_s.append(time.perf_counter() - start)
    return SpeedMeasure(model, task, len(prompts), tokens, tuple(model_s), tuple(ref_s), reproduced,
                        "process_cpu" if adapter.device.type == "cpu" else "wall", tuple(wall_s))


AdapterFactory = Callable[[ResultEntry, "torch.device"], "ModelAdapter"]


def load_for_result(result: ResultEntry, device: "torch.device") -> "ModelAdapter":
    """The adapter a result was made with: its registry name and its weights' dtype."""
    from models.sources import parse_dtype
    from models.registry import load_adapter, model_names, spec_for

    name = result.model
    if not name.startswith("hf:") and name not in model_names():
        raise SpeedError(f"{name} is not a registry model (valid: {', '.join(model_names())}); gate-speed reloads the "
                         f"model by its registry name")
    dtype = parse_dtype(str(result.manifest.get("model", {}).get("dtype", "auto")), device)
    return load_adapter(spec_for(name), device, dtype)


def config_for_result(adapter: "ModelAdapter", result: ResultEntry) -> "ModelConfig":
    """The config a result was decoded with: its recorded options on the model's config at the recorded canvas;
    a record this code cannot rebuild exactly (an option renamed or added since) is a SpeedError."""
    from models.options import leaves, record

    decoding = result.manifest.get("decoding") or {}
    canvas = int(result.manifest["canvas_tokens"])
    settable = {name for name, leaf in leaves(adapter.default_config()).items() if leaf.settable}
    config = adapter.make_config({k: v for k, v in decoding.items() if k in settable}, canvas)
    rebuilt = json.loads(json.dumps(record(config), default=str))
    differing = sorted(k for k in set(decoding) | set(rebuilt) if decoding.get(k) != rebuilt.get(k))
    if differing:
        k = differing[0]
        raise SpeedError(f"{result.model} · {result.task}: the recorded decoding cannot be rebuilt by this code "
                         f"({', '.join(differing)} differ(s); {k}: recorded {decoding.get(k)!r}, rebuilt "
                         f"{rebuilt.get(k)!r}); re-time it with the code that made the run")
    return config


def measure_run(run: Run, settings: SpeedSettings, make_adapter: AdapterFactory = load_for_result) -> dict[str, Any]:
    """Measure every chosen (model, task) of a run; the payload written to ``RUN/gate_speed.json``."""
    import torch

    chosen = [r for r in run.results if (settings.models is None or r.model in settings.models)
              and (settings.tasks is None or r.task in settings.tasks)]
    if not chosen:
        raise SpeedError(f"{run.results_path} has no results for the chosen models and tasks")
    device = torch.device(settings.device)
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        measures = []
        for result in chosen:
            records = run.samples(result.model, result.task)
            if not records:
                raise SpeedError(f"{run.root} has no sample records for {result.model} · {result.task} "
                                 f"(gate-speed needs a run folder with samples/)")
            records = records[: settings.samples]
            adapter = make_adapter(result, device)
            config = config_for_result(adapter, result)
            measures.append(measure(adapter, config, [r.prompt for r in records],
                                    [r.token_ids for r in records], int(result.manifest["canvas_tokens"]),
                                    settings.passes, result.model, result.task))
    finally:
        torch.set_num_threads(threads)
    return {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": {**hardware(device), "torch": torch.__version__, "threads": settings.threads,
                        "device": str(device)},
        "settings": {"passes": settings.passes, "samples": settings.samples, "reference_steps": REFERENCE_STEPS,
                     "reference_prompt": REFERENCE_PROMPT},
        "results": [m.as_dict() for m in measures],
    }


def read_speed(run: Run) -> dict[str, Any] | None:
    """A run's ``gate_speed.json``, or None when it has none; a damaged one is a RunLoadError."""
    path = run.folder.gate_speed_path
    payload = run.folder.read_gate_speed()
    if payload is None:
        return None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or not isinstance(payload.get("results"), list):
        raise RunLoadError(f"{path} is not a {FORMAT} file (rewrite it with run_eval.py gate-speed {run.root})")
    return payload


def speed_entry(payload: dict[str, Any] | None, model: str, task: str) -> dict[str, Any] | None:
    if payload is None:
        return None
    return next((r for r in payload["results"] if r.get("model") == model and r.get("task") == task), None)


def _names(values: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(n for v in values for n in v.split(",") if n.strip()) if values else None


def speed_line(entry: dict[str, Any], result: ResultEntry | None) -> str:
    """One (model, task) of the re-timing, each figure named: the raw tok/s of this machine now (beside the run's
    own raw figure) and the normalised one the gate compares, which the machine's load cancels out of."""
    spread = [v / entry["median_normalized"] - 1 for v in entry["normalized"]]
    own = result.speed.get("tokens_per_second") if result is not None else None
    own_text = f"; the run's own {own:.2f}" if own is not None else ""
    return (f"{entry['model']} · {entry['task']}: raw {entry['median_tokens_per_second']:.2f} tok/s on CPU time "
            f"(median of {len(spread)} re-timed passes{own_text}), normalised {entry['median_normalized']:.3f} "
            f"(tok/s × the reference decoder's CPU seconds, what the gate compares; passes "
            f"{100 * min(spread):+.1f}%..{100 * max(spread):+.1f}%), {entry['reproduced']}/{entry['samples']} "
            f"outputs reproduced")


def main_gate_speed(argv: list[str]) -> int:
    """``run_eval.py gate-speed RUN``: write ``RUN/gate_speed.json`` and print one line per (model, task)."""
    p = OneLineParser(prog="run_eval.py gate-speed", error=SpeedError,
                description="Re-time a finished run against a fixed reference workload, for the regression gate.")
    p.add_argument("run", type=Path, help="run folder (results.json plus samples/)")
    p.add_argument("--passes", type=int, default=SpeedSettings.passes, help="timed passes (default %(default)s)")
    p.add_argument("--samples", type=int, default=SpeedSettings.samples,
                   help="first N stored prompts per model · task (default %(default)s)")
    p.add_argument("--threads", type=int, default=SpeedSettings.threads, help="torch threads (default %(default)s)")
    p.add_argument("--device", default=SpeedSettings.device, help="cpu, cuda, cuda:1 (default %(default)s)")
    p.add_argument("--models", nargs="+", help="only these models")
    p.add_argument("--tasks", nargs="+", help="only these tasks")
    try:
        args = p.parse_args(argv)
        for flag, value in (("--passes", args.passes), ("--samples", args.samples), ("--threads", args.threads)):
            if value < 1:
                raise SpeedError(f"{flag} must be at least 1, got {value}")
        run = load_run(args.run)
        if run.results_path.name != RESULTS_NAME:
            raise SpeedError(f"{args.run} is a bare results file; gate-speed needs the run folder (with samples/)")
        settings = SpeedSettings(args.passes, args.samples, args.threads, args.device, _names(args.models),
                                 _names(args.tasks))
        payload = measure_run(run, settings)
    except (SystemExit, UserError) as failure:
        return one_line_failure("gate-speed", failure)
    except (ValueError, RuntimeError) as error:  # model loading and config errors of the adapters
        print(f"gate-speed: error: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
              file=sys.stderr)
        return USAGE_ERROR
    written = run.folder.write_gate_speed(payload)
    for r in payload["results"]:
        print(speed_line(r, run.result(r["model"], r["task"])))
    print(f"written: {written}")
    return 0
