"""Re-timing times a sweep point the way its run decoded it: rows in flight where the decoder keeps them, static
batches under --schedule static."""

from __future__ import annotations

import torch

from harness.run.runner import Runner, RunSettings
from harness.sweep.plan import Point
from harness.sweep.retime import prepare_point, time_point
from tasks.registry import make_task

torch.set_num_threads(1)


def test_a_continuously_batched_point_is_retimed_as_a_stream(tmp_path):
    timed = {}
    for schedule in ("continuous", "static"):
        settings = RunSettings(models=("tiny-qwen3",), tasks=("gsm8k",), output=tmp_path / schedule, data="fixtures",
                               gen_length=8, batch_size=2, schedule=schedule, progress=False)
        runner = Runner(settings)
        task = make_task("gsm8k")
        point = prepare_point(Point("tiny-qwen3", (), 2), runner, [task], runner.load_all_data([task]), 4)
        (job,) = point.jobs
        assert (job.rows, len(job.batches)) == ((2, 1) if schedule == "continuous" else (None, 2))
        timed[schedule] = time_point(point, 1234)["gsm8k"]
    assert timed["continuous"][0] == timed["static"][0]  # the same tokens, generated until EOS
