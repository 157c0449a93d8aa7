"""Any OpenAI-compatible server as a model: ``--models openai:<base url>[#<served model>]``, asked through chat
completions.

The server renders its own chat template from the messages every other adapter renders locally, and tokenises
itself: nothing is tokenised here. Each request carries the task's stop strings, the canvas as ``max_tokens`` and the
run's decoding (greedy unless ``temperature`` is set); ``--batch-size N`` keeps N requests in flight. ``gen_tokens``
is the server's own count (``usage.completion_tokens``), so a server that does not report ``usage`` cannot be timed
and is refused. Token ids are kept only where the server returns them (vLLM does with
``extra_body={"return_token_ids": true}``).

Speed is measured on this side of the wire, per request: the wall time from sending to the last byte, the tokens the
server says it generated, tokens/s, and, when streamed (the default), the time to the first chunk that carried text
and how many chunks the text came in. A diffusion server streams a block per chunk, so no inter-token latency is
derived from the chunks' times. These figures include the network and the server's queue: the manifest says the
model was served over HTTP, and the report keeps its speed apart from the in-process models'.

Before the first item the server is asked what it serves (``GET /models``) and sent one short probe request, so a
server that is not there, a model it does not serve and an answer without ``usage`` each end the run in one line
before any item runs. Connection errors and 5xx answers are retried with exponential backoff.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from harness.files import write_json_atomic
from models.adapters.engine.openai_client import (Answer, RequestFailed, fetch_json, post_json, post_stream, run_all,
                                                  with_retries)
from models.adapters.engine.server import EngineError
from models.base import (Generation, GenerationRequest, Message, ModelAdapter, ModelConfig, PreparedBatch,
                         TemplateOptions, cut_at_stop, sample_identity)
from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, canvas_field,
                                      require_filled)
from models.decoders.sampling import row_seed
from models.options import unkeyed_field
from models.sources import SERVED_PREFIX, split_served

RECORD_NAME = "served.json"  # in the session's folder (RUN/engine/<model>/): what served the model
LISTING_TIMEOUT_S = 30.0
PROBE = GenerationRequest(messages=(Message("user", "Say OK."),), canvas_tokens=1)
TIMING = ("client side over HTTP: each request from sending to the last byte, network and server queue included; "
          "not comparable with the in-process models' decode timing")


@dataclass(frozen=True)
class ServedConfig:
    """The decoding a request asks for (keyed: it decides the output) and how to reach the server (unkeyed)."""

    max_new_tokens: int | None = canvas_field()  # sent as max_tokens
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None  # the run's seed unless set; sent only when sampling
    extra_body: str | None = None  # a JSON object merged into every request, e.g. {"top_k": 20}
    stream: bool = unkeyed_field(True)  # server-sent events: time to first chunk and chunk counts
    max_retries: int = unkeyed_field(3)  # after a connection error or a 5xx
    retry_backoff_s: float = unkeyed_field(0.5)  # the first wait; each later one doubles
    request_timeout_s: float = unkeyed_field(600.0)
    api_key_env: str | None = unkeyed_field(None)  # an environment variable holding a bearer token


def extra_fields(cfg: ServedConfig) -> dict[str, Any]:
    """``extra_body`` as a mapping; a ConfigError for anything but a JSON object."""
    if cfg.extra_body is None:
        return {}
    try:
        extra = json.loads(cfg.extra_body)
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise ConfigError(f"extra_body must be a JSON object (e.g. '{{\"top_k\": 20}}'), got {cfg.extra_body}")
    return extra


def validate_served(cfg: ServedConfig) -> None:
    """Settings no server can run, found at planning."""
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.temperature < 0:
        raise ConfigError(f"temperature must be >= 0, got {cfg.temperature}")
    if not 0 < cfg.top_p <= 1:
        raise ConfigError(f"top_p must be in (0, 1], got {cfg.top_p}")
    if cfg.max_retries < 0 or cfg.retry_backoff_s < 0 or cfg.request_timeout_s <= 0:
        raise ConfigError("max_retries and retry_backoff_s must be >= 0 and request_timeout_s > 0")
    extra_fields(cfg)


def served_at_canvas(cfg: ServedConfig, canvas: int) -> ServedConfig:
    return dataclasses.replace(cfg, max_new_tokens=canvas)


def served_generate(network: Any, input_ids: Any, attention_mask: Any, config: ServedConfig) -> DecodeOutput:
    """Not an in-process decoder: the server is asked with the requests (``OpenAIAdapter.decode``)."""
    raise ConfigError("the openai kind decodes through its server (OpenAIAdapter.decode), not on a network here")


SERVED = Decoder("openai", ServedConfig, served_generate, served_at_canvas, validate_served)


def served_seed(request: GenerationRequest, seed: int) -> int:
    """The seed a sampled request sends: the run's for an item's first sample (as one-sample runs always sent), and
    for a repeated sample one of its own, from the run's seed, the request and the sample's index."""
    if request.sample == 0:
        return seed
    asked = request.prompt if request.prompt is not None else json.dumps([m.role + "\0" + m.content
                                                                          for m in request.messages])
    return row_seed(seed, sample_identity(asked, request.sample))


def request_body(request: GenerationRequest, template: TemplateOptions, model: str,
                 cfg: ServedConfig) -> tuple[str, dict[str, Any]]:
    """(route, payload) of one request: a chat completion, or a completion for an already rendered prompt. A final
    assistant message is a prefill to continue (``continue_final_message``, as vLLM and SGLang read it)."""
    payload: dict[str, Any] = {"model": model, "max_tokens": cfg.max_new_tokens, "temperature": cfg.temperature,
                               "top_p": cfg.top_p}
    if request.stop:
        payload["stop"] = list(request.stop)
    if cfg.temperature > 0 and cfg.seed is not None:
        payload["seed"] = served_seed(request, cfg.seed)
    if request.prompt is not None:
        return "/completions", {**payload, "prompt": request.prompt, **extra_fields(cfg)}
    payload["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
    if request.messages and request.messages[-1].role == "assistant":
        payload.update(add_generation_prompt=False, continue_final_message=True)
    if template.enable_thinking is not None:
        payload["chat_template_kwargs"] = {"enable_thinking": template.enable_thinking}
    return "/chat/completions", {**payload, **extra_fields(cfg)}


class MissingUsage(ValueError):
    """An answer without ``usage.completion_tokens``."""


@dataclass(frozen=True)
class ServedDecodeResult(DecodeResult):
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str | None = None
    request_latency_s: float = 0.0
    first_chunk_s: float | None = None
    chunks: int | None = None
    attempts: int = 1


def read_answer(answer: Answer, max_tokens: int) -> ServedDecodeResult:
    """One answer's text, the server's token count and the client's times; MissingUsage without a count."""
    body = answer.body
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict) or not isinstance(usage.get("completion_tokens"), int):
        raise MissingUsage("no usage.completion_tokens in the answer")
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = message.get("content") if "message" in choice else choice.get("text")
    tokens, reason = usage["completion_tokens"], choice.get("finish_reason")
    ids = choice.get("token_ids") or []
    cut = reason == "length" or (reason is None and tokens >= max_tokens)  # no reason given: the count says
    return ServedDecodeResult(
        token_ids=[int(t) for t in ids], nfe=0.0, hit_max_tokens=cut,
        text=text if isinstance(text, str) else "", completion_tokens=tokens, finish_reason=reason,
        request_latency_s=answer.seconds, first_chunk_s=answer.first_chunk_s, chunks=answer.chunks,
        attempts=answer.attempts)


@dataclass(frozen=True)
class ServedGeneration(Generation):
    request_latency_s: float = 0.0  # this request's own wall time, client side (N requests in flight)
    request_tokens_per_second: float | None = None  # the server's token count over that time
    first_chunk_s: float | None = None  # streamed: to the first chunk that carried text
    chunks: int | None = None  # streamed: chunks that carried text
    tokens_per_chunk: float | None = None
    finish_reason: str | None = None
    retries: int = 0  # requests sent again after a connection error or a 5xx


class OpenAIAdapter(ModelAdapter):
    kind = "openai"
    decoder = SERVED
    tokenizer = None  # the server tokenises; prompts are ordered by their length in characters

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.base_url, self.asked_model = split_served(self.source.ref)
        self._served_model: str | None = None
        self._files: Path | None = None

    # ---- identity and configuration ------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "dtype": None}  # the server's weights, in the server's dtype

    def network_implementation(self, runtime: Any) -> str:
        return "served"

    def implementation(self, runtime: Any) -> dict[str, Any]:
        return {"network": "served", "attention": "server", "compiled": False, "over": "http"}

    def token_ids(self) -> dict[str, Any]:
        return {}

    def eos_ids(self) -> list[int]:
        return []  # the server stops at its own end of sequence

    def headers(self, cfg: ServedConfig) -> dict[str, str]:
        """The bearer token from the variable ``api_key_env`` names; read when the server is first asked (before
        any item), so rescoring a run needs no key."""
        if cfg.api_key_env is None:
            return {}
        token = os.environ.get(cfg.api_key_env)
        if not token:
            raise ConfigError(f"{self.name}: api_key_env names {cfg.api_key_env}, which is not set (export it, or "
                              f"drop api_key_env for a server without keys)")
        return {"Authorization": f"Bearer {token}"}

    # ---- the server ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def session(self, files: Path) -> Iterator[None]:
        self._files = files
        try:
            yield
        finally:
            self._files = None

    def connect(self, cfg: ServedConfig) -> str:
        """The served model, found (and the server probed) on the first call; later calls return it."""
        if self._served_model is None:
            model = self.pick_model(cfg)
            self.probe(model, cfg)
            self._served_model = model
            if self._files is not None:
                write_json_atomic(self._files / RECORD_NAME, self.record(model, cfg))
        return self._served_model

    def pick_model(self, cfg: ServedConfig) -> str:
        """The model named after ``#``, checked against the server's list, or the one model the server lists."""
        url = f"{self.base_url}/models"
        try:
            listing = with_retries(lambda: fetch_json(url, LISTING_TIMEOUT_S, self.headers(cfg)), cfg.max_retries,
                                   cfg.retry_backoff_s)
        except RequestFailed as failure:
            if failure.status is None:
                raise EngineError(f"{self.name}: no server answers at {self.base_url} (GET {url}: {failure}); start "
                                  f"it, or give the address it listens on") from None
            if failure.status == 404 and self.asked_model:
                return self.asked_model  # a server without a model list: the name given is all there is
            raise EngineError(f"{self.name}: the server at {self.base_url} answered GET /models with {failure}") \
                from None
        data = listing.get("data") if isinstance(listing, dict) else None
        served = [m["id"] for m in data or [] if isinstance(m, dict) and m.get("id")]
        if self.asked_model is not None:
            if self.asked_model not in served:
                raise EngineError(f"{self.name}: the server at {self.base_url} does not serve {self.asked_model} "
                                  f"(it serves: {', '.join(served) or 'nothing'}); name one of those after #")
            return self.asked_model
        if len(served) != 1:
            what = f"several models ({', '.join(served)})" if served else "no model"
            raise EngineError(f"{self.name}: the server at {self.base_url} lists {what}; name the one to ask as "
                              f"{SERVED_PREFIX}{self.base_url}#MODEL")
        return served[0]

    def send(self, request: GenerationRequest, template: TemplateOptions, model: str,
             cfg: ServedConfig) -> Answer:
        """One request, retried after connection errors and 5xx; RequestFailed once the retries are spent."""
        route, payload = request_body(request, template, model, cfg)
        post = post_stream if cfg.stream else post_json
        url, headers = self.base_url + route, self.headers(cfg)
        return with_retries(lambda: post(url, payload, cfg.request_timeout_s, headers), cfg.max_retries,
                            cfg.retry_backoff_s)

    def probe(self, model: str, cfg: ServedConfig) -> None:
        """One short request before any item: the server must answer it, with ``usage``."""
        probe_cfg = dataclasses.replace(cfg, max_new_tokens=1, temperature=0.0)
        try:
            answer = self.send(PROBE, TemplateOptions(), model, probe_cfg)
            read_answer(answer, 1)
        except RequestFailed as failure:
            raise EngineError(f"{self.name}: the server at {self.base_url} refused a first request for {model} "
                              f"({failure})") from None
        except MissingUsage:
            how = ("a streamed answer needs stream_options.include_usage; try --model-arg "
                   f"{self.name}.stream=false" if cfg.stream else "use a server that reports it")
            raise EngineError(f"{self.name}: the server at {self.base_url} answers without usage (the token count "
                              f"that tokens/s needs); {how}") from None

    def record(self, model: str, cfg: ServedConfig) -> dict[str, Any]:
        return {"over": "http", "base_url": self.base_url, "served_model": model, "streamed": cfg.stream,
                "max_retries": cfg.max_retries, "timing": TIMING, "forward_count": "not reported by a server",
                "connected": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def run_manifest(self, files: Path) -> dict[str, Any]:
        path = files / RECORD_NAME
        record = json.loads(path.read_text()) if path.exists() else {"over": "http", "base_url": self.base_url,
                                                                     "served_model": self.asked_model}
        return {"served": {**record, "timing": TIMING}}

    # ---- the three phases ----------------------------------------------------------------------------------
    def render(self, request: GenerationRequest, config: ModelConfig) -> str:
        """What is sent: the rendered prompt, or the messages as JSON (the server applies its template)."""
        if request.prompt is not None:
            return request.prompt
        return json.dumps([{"role": m.role, "content": m.content} for m in request.messages], ensure_ascii=False)

    def prepare(self, requests: Sequence[GenerationRequest], config: ModelConfig) -> PreparedBatch:
        """No token ids (the server tokenises); the server is found and probed here, outside the timed decode."""
        config, canvas = self.at_batch_canvas(requests, config)
        self.connect(config.decoder)
        none = torch.zeros((len(requests), 0), dtype=torch.long)
        return PreparedBatch(requests, [self.render(r, config) for r in requests], none, none, config, canvas)

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        """Every request of the batch in flight at once."""
        cfg = batch.config.decoder
        require_filled(cfg, self.name, roles=("canvas",))
        model = self.connect(cfg)
        answers = run_all([lambda r=r: self.send(r, batch.config.template, model, cfg) for r in batch.requests])
        results = []
        for answer in answers:
            if isinstance(answer, RequestFailed):
                tries = f" after {answer.attempts} tries" if answer.attempts > 1 else ""
                raise EngineError(f"{self.name}: the server at {self.base_url} answered {answer}{tries}; finished "
                                  f"samples are stored; rerun the same command to resume")
            try:
                results.append(read_answer(answer, cfg.max_new_tokens))
            except MissingUsage:
                raise EngineError(f"{self.name}: the server at {self.base_url} answered without usage (the token "
                                  f"count tokens/s needs)") from None
        return results

    def finish(self, batch: PreparedBatch, results: Sequence[DecodeResult]) -> list[Generation]:
        """The server stopped at the stop strings itself; they are cut here too, for a server that ignores them.
        ``gen_tokens`` and ``gen_tokens_after_stop`` are both the server's count: what it generated."""
        out: list[Generation] = []
        for request, result in zip(batch.requests, results):
            assert isinstance(result, ServedDecodeResult)
            tokens, seconds = result.completion_tokens, result.request_latency_s
            out.append(ServedGeneration(
                text=cut_at_stop(result.text, request.stop), raw_text=result.text, token_ids=list(result.token_ids),
                gen_tokens=tokens, gen_tokens_after_stop=tokens, canvas_tokens=request.canvas_tokens, nfe=0.0,
                hit_max_tokens=result.hit_max_tokens, request_latency_s=seconds,
                request_tokens_per_second=tokens / seconds if seconds > 0 else None,
                first_chunk_s=result.first_chunk_s, chunks=result.chunks,
                tokens_per_chunk=tokens / result.chunks if result.chunks else None,
                finish_reason=result.finish_reason, retries=result.attempts - 1))
        return out
