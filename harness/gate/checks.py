"""The regression gate: is a candidate run worse than a baseline run, beyond tolerance and beyond noise?

Accuracy, for each (model, task) of the baseline:
  * both runs carry sample records: items are paired by ``doc_id`` (the sample key would do for identical settings,
    but it also hashes the decoding configuration, and the doc id is what identifies an item); 0/1 scores go into an
    exact McNemar test on the discordant pairs, other scores into a paired t-test; with repeated samples per item
    (``--samples``) an item's figure is its samples' mean, one cluster, and the paired t-test runs over items;
  * otherwise an unpaired test on the summaries: Fisher's exact test on the 2x2 table of right/wrong counts for 0/1
    metrics (recognised by their stderr being sqrt(p(1-p)/(n-1))), a Welch z-test on mean ± stderr for others.
  The p-values are Holm-corrected across every (model, task) compared. A regression is a drop larger than the
  tolerance (in points) that is also significant at the chosen level. Before anything is judged, the gate checks
  that the tolerance is detectable at each task's sample count (harness/gate/power.py) and refuses it otherwise.
Output drift (harness/gate/drift.py): samples whose generated token ids changed; more than ``--max-changed-outputs``
  is a regression. Forwards per token over the paired samples is deterministic and gated exactly by default.
Speed: a regression is a drop of tokens/s larger than the tolerated fraction: of the re-timed, reference-normalised
  median (harness/gate/retiming.py) when both runs carry ``gate_speed.json``, else of the run's own tokens/s (noisy).

Exit status: 0 pass, 1 regression, 2 not comparable, underpowered or bad input (one line on stderr).
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from harness.errors import UserError, one_line_failure
from harness.run.compare import describe_difference, field_differences, implementation_label
from harness.gate.drift import forwards_per_token, output_drift, shared_docs
from harness.gate.power import (NOT_GATED_POINTS, Power, clustered_power, items_needed, no_power, paired_power,
                                unpaired_power)
from harness.gate.verdict import (NOT_COMPARABLE, PASS, REGRESSION, GateError, GateReport, GateRow, GateSettings,
                                 Speed)
from harness.gate.retiming import read_speed, speed_entry
from harness.run.folder import Run, load_run
from harness.run.records import ResultEntry, SampleRecord, as_json
from harness.stats.significance import (AccuracyTest, PairingError, clustered_test, pair_by_doc, paired_test,
                                        unpaired_test)
from harness.stats.estimates import holm_adjust

# --- comparing two runs ---------------------------------------------------------------------------------------------

def _entries(baseline: Run, candidate: Run, tasks: tuple[str, ...] | None) -> list[tuple[ResultEntry, ResultEntry]]:
    chosen = [r for r in baseline.results if tasks is None or r.task in tasks]
    if tasks is not None:
        for side, run in (("baseline", baseline), ("candidate", candidate)):
            missing = sorted(set(tasks) - {r.task for r in run.results})
            if missing:
                raise GateError(f"{side} {run.results_path} has no results for task {', '.join(missing)}")
    if not chosen:
        raise GateError("nothing to compare: the baseline has no results" + (" for those tasks" if tasks else ""))
    pairs = []
    for base in chosen:
        cand = candidate.result(base.model, base.task)
        if cand is None:
            raise GateError(f"candidate has no result for {base.model} · {base.task} "
                            f"(restrict with --tasks, or rerun the candidate with it)")
        pairs.append((base, cand))
    return pairs


def check_comparable(base: ResultEntry, cand: ResultEntry, allow_decoding_change: bool = False) -> list[str]:
    """Raise GateError when the scoring-relevant manifest fields or the primary metric differ; a decoding change
    that is allowed comes back as a note."""
    where = f"{base.model} · {base.task}"
    if base.primary_metric != cand.primary_metric:
        raise GateError(f"{where}: primary metric differs ({base.primary_metric} vs {cand.primary_metric})")
    differing = field_differences(base.manifest, cand.manifest)
    notes = []
    def difference(field: str) -> str:
        return describe_difference(field, base.manifest.get(field), cand.manifest.get(field))

    if allow_decoding_change and "decoding" in differing:
        differing.remove("decoding")
        notes.append(f"{where}: decoding changed (allowed): {difference('decoding')}")
    if differing:
        way_out = ("rerun the candidate with the baseline's settings" +
                   (", or pass --allow-decoding-change" if "decoding" in differing else ""))
        raise GateError(f"not comparable: {where}: {', '.join(differing)} differ(s) "
                        f"({'; '.join(difference(f) for f in differing)}); {way_out}")
    return notes


def accuracy_test(base: ResultEntry, cand: ResultEntry, base_samples: list[SampleRecord] | None,
                  cand_samples: list[SampleRecord] | None) -> AccuracyTest:
    where = f"{base.model} · {base.task}"
    metric = base.primary_metric
    if base_samples and cand_samples:
        try:
            pairs = pair_by_doc(as_json(base_samples), as_json(cand_samples), metric, where)
            repeated = any(s.sample for s in (*base_samples, *cand_samples))
            return clustered_test(pairs) if repeated else paired_test(pairs)
        except PairingError as error:
            raise GateError(str(error)) from None
    b, c = base.metrics.get(metric), cand.metrics.get(metric)
    if not b or not c or b.get("value") is None or c.get("value") is None or not b.get("n") or not c.get("n"):
        raise GateError(f"{where}: no value for {metric} on one side")
    if base.manifest.get("limit") != cand.manifest.get("limit"):
        raise GateError(f"not comparable: {where}: different --limit ({base.manifest.get('limit')} vs "
                        f"{cand.manifest.get('limit')}) and no sample records to pair the shared items")
    return unpaired_test(b, c)


def power_of(test: AccuracyTest, alpha: float, m: int) -> Power:
    if test.item_sd is not None:
        return clustered_power(test.n_baseline, test.item_sd, alpha, m)
    if test.test.startswith("McNemar"):
        return paired_power(test.n_baseline, alpha, m)
    if test.test.startswith("Fisher"):
        return unpaired_power(test.n_baseline, test.n_candidate, alpha, m)
    return no_power(test.n_candidate, alpha, m)


def check_power(where: str, power: Power, settings: GateSettings) -> None:
    """Refuse a tolerance that no drop in these samples could show to be significant (unless allowed)."""
    if settings.allow_underpowered or power.detects(settings.max_accuracy_drop):
        return
    needed = items_needed(power, settings.max_accuracy_drop)
    unit = "paired items" if power.test in ("mcnemar", "clustered") else "items per side"
    if power.test == "clustered":
        smallest = ("fewer than two items, no spread to judge by" if power.min_drop_points is None else
                    f"the smallest significant drop of the items' mean scores is {power.min_drop_points:.1f} points")
    else:
        smallest = ("no drop of at most n items is significant" if power.min_items is None
                    else f"the smallest significant drop is {power.min_items} items, {power.min_drop_points:.1f} "
                         f"points")
    need = (f"it needs n >= {needed}" if needed is not None else "no n can detect it (raise --max-accuracy-drop)")
    family = round(settings.alpha / power.threshold)
    raise GateError(f"underpowered: {where}: {power.n} {unit} cannot detect a drop of "
                    f"{settings.max_accuracy_drop:g} points at alpha {settings.alpha:g} (Holm over {family}: "
                    f"{smallest}); {need}, or pass --allow-underpowered, or --max-accuracy-drop "
                    f"{NOT_GATED_POINTS:g} to not gate accuracy")


def compared_speed(base: ResultEntry, cand: ResultEntry, base_timed: dict | None, cand_timed: dict | None) -> Speed:
    """Re-timed figures when both sides have them for this (model, task), else the runs' own tokens/s."""
    if base_timed and cand_timed and all(base_timed.get(k) == cand_timed.get(k) for k in ("samples", "clock")):
        b, c = base_timed["median_normalized"], cand_timed["median_normalized"]
        return Speed("re-timed", base_timed["median_tokens_per_second"], cand_timed["median_tokens_per_second"],
                     c / b - 1.0 if b else None)
    b, c = base.speed.get("tokens_per_second"), cand.speed.get("tokens_per_second")
    return Speed("run", b, c, c / b - 1.0 if b and c is not None else None)


HARDWARE_KEYS = ("cpu_model", "accelerator", "device_name")


def hardware_warnings(env_b: dict[str, Any], env_c: dict[str, Any], what: str) -> list[str]:
    """One warning when baseline and candidate ran on different hardware, or when one side did not record it (keys
    missing on both sides are ignored: manifests written before the CPU model was recorded)."""
    differing = [k for k in HARDWARE_KEYS if (k in env_b or k in env_c) and env_b.get(k) != env_c.get(k)]
    if not differing:
        return []

    def show(env: dict[str, Any], key: str) -> str:
        return repr(env[key]) if key in env else "not recorded"

    shown = "; ".join(f"{k} {show(env_b, k)} vs {show(env_c, k)}" for k in differing)
    return [f"WARNING: baseline and candidate ({what}) ran on different hardware ({shown}): "
            f"speed is not comparable"]


def speed_notes(baseline: Run, candidate: Run, pairs: Sequence[tuple[ResultEntry, ResultEntry]]) -> list[str]:
    """Settings that make tokens/s differ for reasons other than the code: hardware, dtype, batch size, schedule,
    the network's implementation."""
    notes = hardware_warnings(baseline.manifest.get("environment", {}), candidate.manifest.get("environment", {}),
                              "the runs")
    timed_b, timed_c = read_speed(baseline), read_speed(candidate)
    if timed_b and timed_c:
        notes += hardware_warnings(timed_b.get("environment", {}), timed_c.get("environment", {}), "the re-timings")
    env_b, env_c = baseline.manifest.get("environment", {}), candidate.manifest.get("environment", {})
    for key in ("device_count", "torch", "torch_threads"):
        if env_b.get(key) != env_c.get(key):
            notes.append(f"tokens/s compared across different {key}: {env_b.get(key)} vs {env_c.get(key)}")
    for base, cand in pairs:
        for what, get in (("batch size", lambda r: r.speed.get("batch_size")),
                          ("schedule", lambda r: r.speed.get("schedule", ["static"])),
                          ("network implementation", lambda r: implementation_label(r.manifest)),
                          ("dtype", lambda r: r.manifest.get("model", {}).get("dtype"))):
            if get(base) != get(cand):
                notes.append(f"{base.model} · {base.task}: {what} differs ({get(base)} vs {get(cand)})")
    return notes


def evaluate(baseline: Run, candidate: Run, settings: GateSettings) -> GateReport:
    """Compare every baseline (model, task) with the candidate's; raises GateError when they are not comparable
    or the accuracy tolerance is undetectable."""
    pairs = _entries(baseline, candidate, settings.tasks)
    notes = [n for base, cand in pairs for n in check_comparable(base, cand, settings.allow_decoding_change)]
    samples = [(baseline.samples(b.model, b.task), candidate.samples(c.model, c.task))
               for b, c in pairs]
    tests = [accuracy_test(base, cand, *recs) for (base, cand), recs in zip(pairs, samples)]
    powers = [power_of(t, settings.alpha, len(tests)) for t in tests]
    for (base, _), power in zip(pairs, powers):
        check_power(f"{base.model} · {base.task}", power, settings)
    adjusted = holm_adjust([t.p_value for t in tests])
    timed_b, timed_c = read_speed(baseline), read_speed(candidate)
    rows = []
    for (base, cand), (b_recs, c_recs), test, p_holm, power in zip(pairs, samples, tests, adjusted, powers):
        drift, b_fpt, c_fpt = None, None, None
        if b_recs and c_recs:
            drift = output_drift(b_recs, c_recs, base.manifest.get("decoding") or {})
            docs = shared_docs(b_recs, c_recs)
            b_fpt, c_fpt = forwards_per_token(b_recs, docs), forwards_per_token(c_recs, docs)
        speed = compared_speed(base, cand, speed_entry(timed_b, base.model, base.task),
                               speed_entry(timed_c, cand.model, cand.task))
        rows.append(GateRow(
            model=base.model, task=base.task, metric=base.primary_metric, accuracy=test, p_holm=p_holm,
            power=power, drift=drift, baseline_fpt=b_fpt, candidate_fpt=c_fpt, speed=speed,
            accuracy_regression=(settings.max_accuracy_drop < NOT_GATED_POINTS
                                 and -test.delta_points > settings.max_accuracy_drop and p_holm < settings.alpha),
            drift_regression=(drift is not None and settings.max_changed_outputs is not None
                              and drift.changed > settings.max_changed_outputs),
            forwards_regression=bool(b_fpt and c_fpt is not None
                                     and c_fpt > b_fpt * (1 + settings.max_forwards_increase) + 1e-9),
            speed_regression=speed.change is not None and speed.change < -settings.max_tps_drop,
        ))
    notes += speed_notes(baseline, candidate, pairs)
    if any(r.speed.source == "run" for r in rows) and settings.max_tps_drop < 1:
        notes.append("tokens/s from the runs themselves (one timed pass each, noisy on a shared machine); "
                      "run `run_eval.py gate-speed RUN` on both runs for the re-timed, normalised figure")
    gated = {(b.model, b.task) for b, _ in pairs}
    extra = sorted(f"{r.model} · {r.task}" for r in candidate.results
                   if (r.model, r.task) not in gated and (settings.tasks is None or r.task in settings.tasks))
    if extra:
        notes.append(f"not in the baseline, not gated: {', '.join(extra)}")
    return GateReport(settings, tuple(rows), tuple(notes))


def main_gate(argv: list[str]) -> int:
    """``run_eval.py gate --baseline B --candidate C ...``: print the table, exit 0 pass / 1 regression / 2 bad."""
    from harness.gate.output import build_parser, format_report, settings_from_args

    try:
        args = build_parser().parse_args(argv)
        settings = settings_from_args(args)
        baseline, candidate = load_run(args.baseline), load_run(args.candidate)
        report = evaluate(baseline, candidate, settings)
    except (SystemExit, UserError) as failure:
        return one_line_failure("gate", failure, status=NOT_COMPARABLE)
    print(format_report(report))
    return REGRESSION if report.failed else PASS


if __name__ == "__main__":
    sys.exit(main_gate(sys.argv[1:]))
