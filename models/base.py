"""The one interface between the harness and every model.

A model adapter turns chat messages into token ids (``prepare``), runs its decoder on them (``decode``, the only
part the harness times) and turns the ids back into text (``finish``). It knows nothing about tasks: a request is
messages, a canvas length and stop strings.

Its configuration is a ``ModelConfig``: the chat-template options and the decoder's own frozen config. Options are
typed and applied in ``models.options``; the canvas is set (and the config validated) once, where it is known;
the checkpoint's token ids are filled at decode time, so planning never loads the tokenizer or the weights.
"""

from __future__ import annotations

import contextlib
import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import torch

from models.decoders.contract import ConfigError, DecodeResult, Decoder, Step, canvas_of
from models.decoders.sampling import row_seed
from models.options import ADAPTER, leaves, set_options, split_load_options

if TYPE_CHECKING:
    from models.sources import ModelSource


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant" (a final assistant message is a prefill to continue)
    content: str


@dataclass(frozen=True)
class GenerationRequest:
    """What a task asks of a model: a chat (or an already rendered prompt), a canvas length and stop strings."""

    messages: tuple[Message, ...] = ()
    prompt: str | None = None  # a rendered prompt, used instead of ``messages`` when given
    canvas_tokens: int = 512
    stop: tuple[str, ...] = ()
    sample: int = 0  # which of an item's repeated samples (``--samples``): a sampler draws its own numbers for each


@dataclass(frozen=True)
class Generation:
    """What the harness stores per request."""

    text: str  # decoded, cut at the first stop string, special tokens removed
    raw_text: str  # decoded with special tokens, before stop strings
    token_ids: list[int]
    gen_tokens: int
    gen_tokens_after_stop: int
    canvas_tokens: int
    nfe: float  # the row's share of the network calls (a batched call split across its rows)
    hit_max_tokens: bool
    forwards: int | None = field(default=None, kw_only=True)  # the forwards the row took part in (None: unknown)
    commit_step: tuple[int, ...] | None = field(default=None, kw_only=True)  # per token of token_ids (DecodeResult)
    edits: int | None = field(default=None, kw_only=True)  # re-takes of committed tokens (token editing only)
    token_text: tuple[str, ...] | None = field(default=None, kw_only=True)  # per token of token_ids (token_pieces)


@dataclass(frozen=True)
class TemplateOptions:
    """How the chat template renders a prompt; not a decoder setting."""

    enable_thinking: bool | None = None  # Qwen3-style templates only; None leaves the template's default


@dataclass(frozen=True)
class RuntimeOptions:
    """How an adapter runs its network (which implementation, compiled or not); none by default. An adapter with
    such choices subclasses this. They are options like any other and stay in sample keys: another implementation
    of the same weights may flip a near-tie."""


@dataclass(frozen=True)
class ModelConfig:
    """Everything that decides a model's output apart from its weights and the prompt."""

    template: TemplateOptions
    decoder: Any  # the decoder's frozen config (``Decoder.config_class``)
    runtime: Any = dataclasses.field(default_factory=RuntimeOptions)  # the adapter's ``RuntimeOptions``


@dataclass(frozen=True)
class PreparedBatch:
    """Token ids of a batch, ready for ``decode``. Left padded; ``attention_mask`` marks real tokens; ``config``
    has this batch's canvas and the checkpoint's token ids."""

    requests: Sequence[GenerationRequest]
    prompts: list[str]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    config: ModelConfig
    canvas: int
    row_seeds: tuple[int, ...] | None = None  # each row's own random stream; None for an unseeded config


PIECE_CONTEXT = 8  # tokens decoded before each one, so a piece keeps the spacing the whole decode gives it


def token_pieces(tokenizer: Any, ids: Sequence[int]) -> tuple[str, ...] | None:
    """Each id's share of the decoded text (special tokens kept), for the report's decode replay: what decoding it
    after the ``PIECE_CONTEXT`` ids before it adds. A character split over several ids (bytes of UTF-8) belongs to
    the id that completes it; the ids before get "". None where the pieces do not join to the whole decode (a
    tokenizer whose decode depends on more than that context), so a piece shown is always the decode's own text."""
    windows = [list(ids[max(0, i - PIECE_CONTEXT):i + end]) for i in range(len(ids)) for end in (0, 1)]
    texts = tokenizer.batch_decode(windows, skip_special_tokens=False) if windows else []
    pieces = []
    for i in range(len(ids)):
        before, after = texts[2 * i].rstrip("\ufffd"), texts[2 * i + 1]
        if i + 1 < len(ids):
            after = after.rstrip("\ufffd")
        if not after.startswith(before):
            return None
        pieces.append(after[len(before):])
    whole = tokenizer.decode(list(ids), skip_special_tokens=False)
    return tuple(pieces) if "".join(pieces) == whole else None


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """Cut ``text`` before the earliest occurrence of any stop string."""
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut]


def sample_identity(prompt: str, sample: int) -> str:
    """What a request's own seed is hashed from: its rendered prompt, and for an item's repeated samples after the
    first the sample's index (the first keeps the prompt alone, the seed one-sample runs always had)."""
    return prompt if sample == 0 else f"{prompt}\0sample {sample}"


def row_seeds(config: ModelConfig, prompts: Sequence[str], samples: Sequence[int]) -> tuple[int, ...] | None:
    """Each request's own seed: the config's (run) seed hashed with the request's ``sample_identity``, so a request
    draws the same numbers in any batch and different requests (items, or samples of one item) draw different ones.
    None when the config has no seed."""
    seed = leaves(config.decoder).get("seed")
    value = None if seed is None else seed.value
    return None if value is None else tuple(row_seed(value, sample_identity(prompt, sample))
                                            for prompt, sample in zip(prompts, samples, strict=True))


class ModelAdapter(ABC):
    """Base class of every adapter. Subclasses set ``kind`` and ``decoder`` (and ``template`` defaults) and provide
    ``tokenizer``, ``network``, ``eos_ids`` and ``token_ids``; weights load lazily, so planning and rescoring never
    pay for them."""

    kind: str
    decoder: Decoder
    template: TemplateOptions = TemplateOptions()
    runtime: RuntimeOptions = RuntimeOptions()
    tokenizer: Any
    network: Any

    def __init__(self, name: str, source: "ModelSource", device: torch.device, dtype: torch.dtype,
                 defaults: dict[str, Any] | None = None):
        self.name = name
        self.source = source
        self.device = device
        self.dtype = dtype
        self._defaults = set_options(self.base_config(), defaults or {}, name)

    # ---- configuration -------------------------------------------------------------------------------------
    @classmethod
    def base_config(cls) -> ModelConfig:
        """The kind's configuration before any registry default: what its options are and their types."""
        return ModelConfig(cls.template, cls.decoder.config_class(), cls.runtime)

    def default_config(self) -> ModelConfig:
        """This model's configuration with its registry defaults, before any canvas."""
        return self._defaults

    def make_config(self, overrides: dict[str, Any] | None = None, canvas: int | None = None,
                    seed: int | None = None) -> ModelConfig:
        """The defaults with ``overrides`` (typed and checked) and ``seed`` for a sampler that has none, in one
        pass; with ``canvas`` also resolved and validated. Without one, ``prepare`` resolves it from the requests.
        A load option among ``overrides`` (a LoRA ``adapter``) was applied when the weights were chosen: it must name
        what was loaded."""
        loads, overrides = split_load_options(self.name, overrides or {})
        if ADAPTER in loads:
            self.check_adapter(loads[ADAPTER])
        config = set_options(self._defaults, overrides, self.name, seed=seed)
        return config if canvas is None else self.at_canvas(config, canvas)

    def check_adapter(self, path: str | None) -> None:
        """One line unless ``path`` is the LoRA folder this adapter's weights were chosen with (or both are none)."""
        loaded = getattr(self.source, "adapter", None)
        same = (loaded is None) if path is None else (
            loaded is not None and Path(path).expanduser().resolve() == Path(loaded.folder))
        if not same:
            raise ConfigError(f"{self.name}: adapter={path} is not the LoRA the model was loaded with "
                              f"({loaded.folder if loaded else 'none'}); a LoRA is set once per model, where it "
                              f"loads (--model-arg {self.name}.adapter=PATH), not per task or preset")

    def at_canvas(self, config: ModelConfig, canvas: int) -> ModelConfig:
        """The config for one canvas length, checked: a combination the decoder cannot run fails here."""
        decoder = self.decoder.at_canvas(config.decoder, canvas)
        try:
            self.decoder.validate(decoder)
        except ConfigError as error:
            raise ConfigError(f"{self.name}: {error}") from None
        return dataclasses.replace(config, decoder=decoder)

    def identity(self) -> dict[str, Any]:
        """What identifies this model's outputs apart from the decoding config (weights and their dtype)."""
        lora = getattr(self.source, "adapter", None)  # a LoRA by its files' hash, never its path
        return {"name": self.name, "kind": self.kind, "ref": self.source.ref, "fingerprint": self.source.fingerprint,
                "dtype": str(self.dtype).removeprefix("torch."), **({"adapter": lora.sha256} if lora else {})}

    # ---- the three phases ----------------------------------------------------------------------------------
    def render(self, request: GenerationRequest, config: ModelConfig) -> str:
        """The prompt text: the request's own, or its messages through the model's chat template. The template
        option ``enable_thinking`` (Qwen3-style templates) is passed on when it is not None."""
        if request.prompt is not None:
            return request.prompt
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        prefill = bool(messages) and messages[-1]["role"] == "assistant"
        thinking = config.template.enable_thinking
        kwargs = {} if thinking is None else {"enable_thinking": thinking}
        return self.tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=not prefill,
            continue_final_message=prefill,
            **kwargs,
        )

    def at_batch_canvas(self, requests: Sequence[GenerationRequest], config: ModelConfig) -> tuple[ModelConfig, int]:
        """The config at the batch's one canvas length (set here when planning left it unset), and that length."""
        canvases = sorted({r.canvas_tokens for r in requests})
        if len(canvases) != 1:
            raise ValueError(f"{self.name}: a batch decodes one canvas length, got {canvases}")
        canvas, planned = canvases[0], canvas_of(config.decoder)
        if planned is None:
            config = self.at_canvas(config, canvas)
        elif planned != canvas:
            raise ValueError(f"{self.name}: the config was made for a {planned}-token canvas, the batch asks {canvas}")
        return config, canvas

    def prepare(self, requests: Sequence[GenerationRequest], config: ModelConfig) -> PreparedBatch:
        config, canvas = self.at_batch_canvas(requests, config)
        config = dataclasses.replace(  # the token ids filled here, once, so nothing reflects over it in decode
            config, decoder=set_options(config.decoder, self.token_ids(), self.name, adapter_fields=True))
        prompts = [self.render(r, config) for r in requests]
        encoded = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        width = max(len(e) for e in encoded)
        pad = self.pad_id()
        ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, e in enumerate(encoded):
            ids[row, width - len(e):] = torch.tensor(e, dtype=torch.long)
            mask[row, width - len(e):] = 1
        return PreparedBatch(requests, prompts, ids.to(self.device), mask.to(self.device), config, canvas,
                             row_seeds(config, prompts, [r.sample for r in requests]))

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        """Run the decoder. This is the call the harness times: no tokenisation and no option handling here
        (``prepare`` did both)."""
        network = self.network_for(batch.config.runtime)
        seeds = {} if batch.row_seeds is None else {"row_seeds": batch.row_seeds}
        return list(self.decoder.generate(network, batch.input_ids, batch.attention_mask, batch.config.decoder,
                                          **seeds).rows)

    def stream(self, batch: PreparedBatch, max_rows: int) -> Iterator[Step]:
        """Rows in flight over every request of ``batch``: the decoder's ``Step`` of each forward, the finished
        requests by position in the batch (``finish_some`` turns them into generations). Only for a decoder with
        ``stream``."""
        if self.decoder.stream is None:
            raise ValueError(f"{self.name}: the {self.decoder.name} decoder has no rows in flight")
        network = self.network_for(batch.config.runtime)
        prompts = [row[mask.bool()] for row, mask in zip(batch.input_ids, batch.attention_mask)]
        yield from self.decoder.stream(network, prompts, batch.config.decoder, max_rows, batch.row_seeds)

    def finish_some(self, batch: PreparedBatch, finished: Sequence[tuple[int, DecodeResult]]) -> list[Generation]:
        """``finish`` for some of the batch's requests (by position), in the order given."""
        requests = [batch.requests[i] for i, _ in finished]
        return self.finish(dataclasses.replace(batch, requests=requests), [result for _, result in finished])

    def network_for(self, runtime: RuntimeOptions) -> Any:
        """The network a batch runs on; an adapter with runtime options picks it by them."""
        return self.network

    def network_implementation(self, runtime: RuntimeOptions) -> str:
        """``native`` (models/networks), ``transformers`` or ``engine``: whose code runs the network."""
        return "transformers"

    def implementation(self, runtime: RuntimeOptions) -> dict[str, Any]:
        """What a speed figure depends on besides the decoder: the network's implementation, its attention kernel
        (SDPA in this process, the engine's own in a server) and whether its steps run compiled. Two models
        compared on speed should agree on these; the report marks the pairs that do not."""
        network = self.network_implementation(runtime)
        return {"network": network, "attention": "engine" if network == "engine" else "sdpa",
                "compiled": bool(getattr(runtime, "compile", False))}

    def forward_modules(self, network: Any) -> Any:
        """What the forward timer hooks: the network itself, one call per forward; an adapter whose generate calls
        submodules instead (DiffusionGemma: its encoder and decoder) names those."""
        return network

    @abstractmethod
    def token_ids(self) -> dict[str, Any]:
        """The decoder config's token-id fields, from the tokenizer (or the generation config)."""

    def finish(self, batch: PreparedBatch, results: Sequence[DecodeResult]) -> list[Generation]:
        out = []
        for request, result in zip(batch.requests, results):
            raw = self.tokenizer.decode(result.token_ids, skip_special_tokens=False)
            kept = cut_at_stop(raw, request.stop)
            ids_after_stop = self.tokenizer(kept, add_special_tokens=False)["input_ids"]
            text = self.tokenizer.decode(ids_after_stop, skip_special_tokens=True)
            gen_after = self.ids_before_cut(result.token_ids, kept)
            out.append(
                Generation(
                    text=text,
                    raw_text=raw,
                    token_ids=list(result.token_ids),
                    gen_tokens=len(result.token_ids),
                    gen_tokens_after_stop=gen_after,
                    canvas_tokens=request.canvas_tokens,
                    nfe=result.nfe,
                    hit_max_tokens=result.hit_max_tokens,
                    forwards=result.forwards,
                    commit_step=result.commit_step,
                    edits=result.edits,
                    token_text=None if result.commit_step is None else token_pieces(self.tokenizer, result.token_ids),
                )
            )
        return out

    def ids_before_cut(self, ids: Sequence[int], kept: str) -> int:
        """How many of the generated ids (special ones not counted) make up ``kept``, a prefix of their decoded
        text: the shortest prefix of ``ids`` whose text starts with ``kept``. Counted on the ids themselves, since
        re-tokenising text that holds a split byte sequence (U+FFFD) can give more ids than were generated."""
        decode = lambda n: self.tokenizer.decode(list(ids[:n]), skip_special_tokens=False)  # noqa: E731
        low, high = 0, len(ids)  # the answer lies in [low, high]: decode(high) starts with kept
        while low < high:
            mid = (low + high) // 2
            if decode(mid).startswith(kept):
                high = mid
            else:
                low = mid + 1
        special = set(self.tokenizer.all_special_ids)
        return sum(1 for t in ids[:high] if t not in special)

    def token_id(self, token: str) -> int:
        """The id of one of the model's special tokens; a checkpoint without it fails with one line."""
        found = self.tokenizer.convert_tokens_to_ids(token)
        if found is None or found == self.tokenizer.unk_token_id:
            raise ConfigError(f"{self.name}: the tokenizer has no {token} token (is this the right checkpoint?)")
        return found

    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.eos_ids()[0]

    @abstractmethod
    def eos_ids(self) -> list[int]:
        """End-of-sequence ids: generation stops (or is cut) at the first of these."""

    # ---- lifecycle (adapters that own an outside process, e.g. an engine server) -----------------------------
    def session(self, files: Path) -> contextlib.AbstractContextManager:
        """Entered by the runner around this model's jobs; an adapter that starts something stops it on exit and
        keeps its files (logs) in ``files``, a folder of the run given by the runner."""
        return contextlib.nullcontext()

    def run_manifest(self, files: Path) -> dict[str, Any]:
        """Extra manifest entries for this model's results (an engine's name, version and launch arguments), read
        from the folder its ``session`` kept its files in."""
        return {}

    def generate(self, requests: Sequence[GenerationRequest], config: ModelConfig | None = None) -> list[Generation]:
        """Convenience for callers that do not time: prepare, decode and finish in one call."""
        batch = self.prepare(requests, config if config is not None else self.make_config())
        return self.finish(batch, self.decode(batch))
