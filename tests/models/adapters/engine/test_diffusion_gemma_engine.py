"""DiffusionGemma through ``vllm:``: what serving it needs, and that where the engine cannot serve it (the CPU build
0.32.0) the run ends with one line naming the refusal and the log, not a traceback."""

from __future__ import annotations

import json

from harness.cli import main
from models.adapters.engine.server import refusal
from models.sources import resolve_source

# The server arguments DiffusionGemma needs: vLLM's DiffusionConfig (canvas and denoising steps; tiny canvas is 16).
DIFFUSION_CONFIG = json.dumps({"canvas_length": 16, "max_denoising_steps": 4})


def test_the_refusal_is_the_last_error_of_the_latest_launch(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "=== 2026-01-01T00:00:00 launch: python -m vllm\nValueError: an older launch's failure\n"
        "=== 2026-01-01T00:01:00 launch: python -m vllm\n"
        "(APIServer pid=1) WARNING 12-03 [system_utils.py:255] ... like `OSError: [Errno 24] Too many open files`\n"
        "(APIServer pid=1) ERROR 12-03 [registry.py:1120] ModuleNotFoundError: No module named 'torchvision'\n"
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, Model architectures ['X'] failed to be inspected. [type=value_error, input_value=...]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n")
    assert refusal(log) == "Value error, Model architectures ['X'] failed to be inspected."
    log.write_text("=== t launch: x\nusage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: -q\n")
    assert refusal(log) == "error: unrecognized arguments: -q"
    log.write_text("=== t launch: x\nall is well\n")
    assert refusal(log) is None and refusal(tmp_path / "absent.log") is None


def test_a_server_that_refuses_diffusiongemma_ends_the_run_in_one_line(engine_python, capsys, tmp_path):
    name = f"vllm:{resolve_source('tiny-diffusiongemma').path}"
    code = main(["--models", name, "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1", "--gen-length", "16",
                 "--dtype", "float32", "--output", str(tmp_path / "run"), "--no-progress",
                 "--model-arg", f"{name}.server_python={engine_python}",
                 "--model-arg", f"{name}.server_args=--diffusion-config '{DIFFUSION_CONFIG}'"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "exited with status" in err and "healthy: " in err and "server.log" in err  # the refusal, then the log
    assert not list((tmp_path / "run" / "store").rglob("*.jsonl"))  # nothing was generated
