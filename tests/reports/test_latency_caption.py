"""The latency figure's caption says what each run's schedule measured (reports/latency_caption.py), read from the
sample records the runner wrote (harness/run/generation.py): a continuous run's latency is a request's own time from
admission, a static batch's is its time split across its rows."""

from __future__ import annotations

import html
import re

from reports.html import write_report


def continuous_records(rf, rows: int) -> list[dict]:
    """Records as ``stream_batches`` writes them: a request's own latency, no batch time, the phase's clock."""
    records = rf.samples([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], tokens=12)
    for i, record in enumerate(records):
        if not record["warmup"]:  # the warm-up stays a static batch, as the runner decodes it
            record.update(schedule="continuous", batch_size=rows, batch_latency_s=None, queue_s=0.1 * i,
                          phase="phase-1", phase_elapsed_s=0.6 + 0.1 * i)
    return records


def static_records(rf, rows: int) -> list[dict]:
    """Records as ``static_batch`` writes them: the batch's time split across its rows."""
    records = rf.samples([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], tokens=12, latency=0.2)
    for record in records:
        record.update(schedule="static", batch_size=rows, batch_latency_s=0.2 * rows)
    return records


def caption(report_path) -> str:
    page = report_path.read_text()
    found = re.search(r'<section id="latency">.*?<figcaption>(.*?)</figcaption>', page, re.DOTALL)
    assert found, "the report has no latency figure"
    return " ".join(html.unescape(found.group(1)).split())


def run(rf, folder, model, records):
    return rf.write_run(folder, [rf.Entry(model, "gsm8k", records, kind="llada")])


def test_a_continuous_run_says_latency_runs_from_admission(tmp_path, rf):
    folder = run(rf, tmp_path / "continuous", "tiny-llada", continuous_records(rf, 8))
    text = caption(write_report([folder], tmp_path / "out"))
    assert "rows in flight (continuous schedule, up to 8 rows)" in text
    assert "from the forward that admitted it to the one that gave its last token" in text
    assert "split evenly" not in text and "static" not in text  # the warm-up's static batch is not in the figure


def test_a_static_run_says_latency_is_its_batch_time_split_across_rows(tmp_path, rf):
    folder = run(rf, tmp_path / "static", "tiny-llada", static_records(rf, 4))
    text = caption(write_report([folder], tmp_path / "out"))
    assert "static batches of up to 4 rows a sample's latency is its batch's wall time split evenly" in text
    assert "admitted" not in text


def test_a_report_of_both_names_the_models_of_each_schedule(tmp_path, rf):
    streamed = run(rf, tmp_path / "continuous", "tiny-llada", continuous_records(rf, 8))
    batched = run(rf, tmp_path / "static", "tiny-dream", static_records(rf, 4))
    text = caption(write_report([streamed, batched], tmp_path / "out"))
    assert "tiny-llada: with rows in flight (continuous schedule, up to 8 rows)" in text
    assert "tiny-dream: in static batches of up to 4 rows" in text


def test_one_request_per_call_is_the_calls_own_time(tmp_path, rf):
    folder = run(rf, tmp_path / "single", "tiny-llada", rf.samples([1.0, 0.0, 1.0]))  # static, batch 1
    text = caption(write_report([folder], tmp_path / "out"))
    assert text.endswith("Decoded one request per call (static, batch 1) a sample's latency is the call's wall time.")
