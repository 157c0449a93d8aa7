"""The autoregressive decoder against independent computations, on the native network and on transformers behind
the same cache protocol: full recompute, transformers' own ``generate`` (batch 1 and left-padded batches of 8),
rows alone against rows in a ragged batch, scripted end-of-sequence, and the forwards each row took part in."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from harness.timing.op_count import OpCounter
from models.adapters.native import NetworkCalls
from models.decoders.ar import ARConfig, ar_generate, ar_stream
from models.networks.hf_causal import TransformersCausalLM
from models.networks.kv_buffer import KVBuffer
from models.networks.loading import load_network
from models.tiny import materialize

torch.set_num_threads(1)
EOS_NEVER = -1


def save(model: torch.nn.Module, folder) -> str:
    model.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> tuple[Qwen3ForCausalLM, str]:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.2)
    model = Qwen3ForCausalLM(config).eval()
    return model, save(model, tmp_path_factory.mktemp("qwen3"))


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> tuple[Qwen2ForCausalLM, str]:
    """Qwen2.5's layout: q/k/v bias, tied embeddings as the small ones have."""
    torch.manual_seed(1)
    config = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
                         tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config).eval()
    return model, save(model, tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module", params=["native", "transformers"])
def network(request, qwen3):
    """The decoder's network: the native Qwen3 with the checkpoint's weights, or transformers' behind the protocol."""
    model, folder = qwen3
    return load_network(folder, "qwen3", dtype=torch.float32) if request.param == "native" \
        else TransformersCausalLM(model)


def left_padded(prompts: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    return ids, mask


def run(network, prompts: list[list[int]], steps: int, eos=(EOS_NEVER,), sampling=ARConfig(), **kwargs):
    cfg = dataclasses.replace(sampling, max_new_tokens=steps, eos_ids=tuple(eos), pad_id=0)
    return ar_generate(network, *left_padded(prompts), cfg, **kwargs)


def generate(model, prompts: list[list[int]], steps: int, eos: int) -> list[list[int]]:
    """transformers' own greedy generate on the left-padded batch, each row cut after its first ``eos``."""
    ids, mask = left_padded(prompts)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=steps,
                         eos_token_id=eos, pad_token_id=0)[:, ids.shape[1]:].tolist()
    return [row[:row.index(eos) + 1] if eos in row else row for row in out]


def greedy_by_full_recompute(model, prompt: list[int], steps: int) -> list[int]:
    """No cache: every step runs the whole sequence again and takes the argmax of the last row."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            x = torch.tensor([ids])
            logits = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits
            ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt):]


RAGGED = [[5, 17, 42], [7, 1, 2, 3, 4, 5, 6, 8, 9], [250, 12], [3] * 12, [9, 8, 7, 6], [100], [44, 45, 46, 47, 48],
          [11, 12, 13, 14, 15, 16, 17]]


def test_cached_decoding_equals_full_recompute(network, qwen3):
    prompt = [5, 17, 42, 8, 99, 3]
    output = run(network, [prompt], 24)
    (result,) = output.rows
    assert result.token_ids == greedy_by_full_recompute(qwen3[0], prompt, 24)
    assert result.forwards == result.nfe == output.nfe == 24  # one prefill plus 23 single-token steps
    assert result.hit_max_tokens


def test_batch_of_eight_equals_transformers_generate_and_each_row_alone(network, qwen3):
    model, _ = qwen3
    batched = run(network, RAGGED, 20)
    expected = generate(model, RAGGED, 20, eos=299)
    for prompt, row, reference in zip(RAGGED, batched.rows, expected):
        (alone,) = run(network, [prompt], 20).rows
        assert row.token_ids == alone.token_ids == reference[:20]
        assert row.forwards == alone.forwards == 20  # the same at any batch size: one forward per token


@pytest.mark.parametrize("source", ["tiny-qwen3", "qwen2"])
def test_native_checkpoints_equal_transformers_generate(source, qwen2):
    """tiny-qwen3 (the registry's, its local tokenizer's ids) and a Qwen2.5-layout checkpoint, loaded natively."""
    if source == "qwen2":
        model, folder = qwen2
        kind = "qwen2"
    else:
        folder = str(materialize(source))
        model, kind = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), "qwen3"
    native = load_network(folder, kind, dtype=torch.float32)
    vocab = model.config.vocab_size
    prompts = [[(7 * i + 3 * j) % (vocab - 1) + 1 for j in range(3 + 2 * i)] for i in range(8)]
    for batch in (prompts[:1], prompts):
        rows = run(native, batch, 16, eos=(vocab - 1,)).rows
        assert [r.token_ids for r in rows] == generate(model, batch, 16, eos=vocab - 1)


def test_rows_stop_at_their_own_eos_and_leave_the_batch(network):
    free = run(network, RAGGED[:3], 16).rows
    row0 = free[0].token_ids
    step = next(k for k in range(1, len(row0)) if row0[k] not in row0[:k])  # first new token after step 0
    eos = row0[step]
    calls: list[int] = []
    counted = RowCounter(network, calls)
    stopped = run(counted, RAGGED[:3], 16, eos=(eos,)).rows
    assert stopped[0].token_ids == row0[: step + 1] and not stopped[0].hit_max_tokens
    for free_row, row in zip(free[1:], stopped[1:]):
        cut = free_row.token_ids.index(eos) + 1 if eos in free_row.token_ids else 16
        assert row.token_ids == free_row.token_ids[:cut]
    for row in stopped:
        assert row.forwards == len(row.token_ids)
        # each forward's cost is split across the rows in it: the row's share is below its forwards once rows leave
        assert row.nfe == pytest.approx(sum(1 / width for width in calls[:row.forwards]))
    assert calls == [sum(len(r.token_ids) > k for r in stopped) for k in range(len(calls))]  # finished rows left


class RowCounter(torch.nn.Module):
    """The network, recording how many rows each forward ran."""

    def __init__(self, inner, calls: list[int]) -> None:
        super().__init__()
        self.inner, self.calls, self.caches = inner, calls, []

    def new_cache(self, batch: int, capacity: int):
        cache = self.inner.new_cache(batch, capacity)
        self.caches.append((cache, cache.kv.data_ptr() if isinstance(cache, KVBuffer) else None))
        return cache

    def causal_forward(self, input_ids, cache, read=None):
        self.calls.append(input_ids.shape[0])
        return self.inner.causal_forward(input_ids, cache, read=read)


def test_seeded_sampling_is_the_same_on_both_implementations_and_in_any_batch(qwen3):
    model, folder = qwen3
    native, hf = load_network(folder, "qwen3", dtype=torch.float32), TransformersCausalLM(model)
    sampling = ARConfig(do_sample=True, temperature=1.5, top_k=50, top_p=0.95, seed=7)
    seeds = [11, 12, 13]
    draws = {name: [r.token_ids for r in run(net, RAGGED[:3], 24, sampling=sampling, row_seeds=seeds).rows]
             for name, net in (("native", native), ("transformers", hf))}
    assert draws["native"] == draws["transformers"]
    alone = run(native, RAGGED[1:2], 24, sampling=sampling, row_seeds=seeds[1:2]).rows[0].token_ids
    assert alone == draws["native"][1]
    shared = [run(net, RAGGED[:1], 24, sampling=sampling).rows[0].token_ids for net in (native, hf)]
    assert shared[0] == shared[1] != run(native, RAGGED[:1], 24).rows[0].token_ids  # and it does sample


def test_compiled_native_network_gives_the_eager_tokens(qwen3, monkeypatch):
    """The ``compile`` option's path (one graph per call shape; dynamo's graphs run op by op here)."""
    from models.networks import compiled

    torch._dynamo.reset()
    monkeypatch.setattr(compiled, "BACKEND", "eager")
    native = load_network(qwen3[1], "qwen3", dtype=torch.float32)
    eager = [r.token_ids for r in run(native, RAGGED[:4], 12).rows]
    assert [r.token_ids for r in run(compiled.CompiledNetwork(native), RAGGED[:4], 12).rows] == eager
    torch._dynamo.reset()


def stream(network, prompts: list[list[int]], steps: int, eos, max_rows: int, sampling=ARConfig(), row_seeds=None):
    """Rows in flight: each prompt's result, and the rows of every network call. On the native network the stream
    holds one cache of a row per request in flight (slots), whose memory rows join and leave without moving."""
    cfg = dataclasses.replace(sampling, max_new_tokens=steps, eos_ids=tuple(eos), pad_id=0)
    finished, widths, in_flight = {}, [], set()
    counted = RowCounter(network, widths)
    native = isinstance(network.new_cache(1, 1), KVBuffer)
    with torch.inference_mode():
        for step in ar_stream(counted, [torch.tensor(p) for p in prompts], cfg, max_rows, row_seeds):
            in_flight |= set(step.admitted)
            assert step.rows == len(in_flight) <= max_rows
            if len(in_flight) + len(finished) < len(prompts):  # prompts still wait: the rows are full
                assert step.rows == max_rows
            for i, result in step.finished:
                assert i not in finished
                finished[i] = result
                in_flight.remove(i)
    if native:
        (cache, memory), = counted.caches
        assert cache.batch == min(max_rows, len(prompts)) and cache.kv.data_ptr() == memory
    return [finished[i] for i in range(len(prompts))], widths


def many_prompts(n: int) -> list[list[int]]:
    """``n`` prompts of mixed lengths (1-14 ids): RAGGED, then seeded ones."""
    g = torch.Generator().manual_seed(5)
    extra = [torch.randint(1, 290, (1 + 5 * i % 14,), generator=g).tolist() for i in range(max(n - len(RAGGED), 0))]
    return (RAGGED + extra)[:n]


@pytest.mark.parametrize("max_rows, requests", [(1, 11), (3, 11), (8, 11), (32, 40)])
def test_rows_in_flight_equal_each_request_alone(network, max_rows, requests):
    """More requests than rows, mixed prompt lengths, end-of-sequence early in some rows and late or never in
    others: every row's tokens and forwards are its decode alone's, whenever it was admitted (and into whichever
    cache row a finished one left)."""
    prompts = many_prompts(requests)
    free = [run(network, [p], 18).rows[0].token_ids for p in prompts]
    eos = (free[0][3], free[4][9])  # one row ends early, one late; others where these ids happen to fall
    alone = [run(network, [p], 18, eos=eos).rows[0] for p in prompts]
    assert len({len(r.token_ids) for r in alone}) > 2, "rows should end at different steps"
    rows, widths = stream(network, prompts, 18, eos, max_rows)
    assert [r.token_ids for r in rows] == [r.token_ids for r in alone]
    assert [r.forwards for r in rows] == [r.forwards for r in alone]
    assert sum(r.nfe for r in rows) == pytest.approx(len(widths))  # each call's cost split across its rows
    assert max(widths) <= max_rows  # a waiting request is prefilled in a call of its own, then joins the others


def test_rows_in_flight_read_the_host_once_per_forward(network):
    """The prompts are read once and each forward's tokens once; nothing else waits on the device (the native
    cache's slots and the transformers cache's columns are known on the host), with rows joining and leaving."""
    prompts = many_prompts(11)
    free = run(network, prompts[:1], 12).rows[0].token_ids
    cfg = ARConfig(max_new_tokens=12, eos_ids=(free[4],), pad_id=0)
    calls = NetworkCalls(network) if isinstance(network.new_cache(1, 1), KVBuffer) else network
    with torch.inference_mode(), OpCounter(calls) as counts:
        steps = list(ar_stream(calls, [torch.tensor(p) for p in prompts], cfg, 4))
    assert any(step.admitted and step.rows > len(step.admitted) for step in steps)  # some joined running rows
    assert counts.forwards > len(steps) and counts.read_count == counts.forwards + 1


@pytest.mark.parametrize("max_rows, requests", [(3, 8), (32, 40)])
def test_rows_in_flight_sample_each_requests_own_draws(qwen3, max_rows, requests):
    sampling = ARConfig(do_sample=True, temperature=1.5, top_k=50, top_p=0.95, seed=7)
    native = load_network(qwen3[1], "qwen3", dtype=torch.float32)
    prompts = many_prompts(requests)
    seeds = list(range(100, 100 + len(prompts)))
    free = [run(native, [p], 16, sampling=sampling, row_seeds=[seed]).rows[0].token_ids
            for p, seed in zip(prompts, seeds)]
    eos = (free[0][2], free[5][11])  # rows end at different steps, so requests join rows others left
    rows, _ = stream(native, prompts, 16, eos, max_rows, sampling, seeds)
    alone = [run(native, [p], 16, eos=eos, sampling=sampling, row_seeds=[seed]).rows[0]
             for p, seed in zip(prompts, seeds)]
    assert len({len(r.token_ids) for r in alone}) > 2, "rows should end at different steps"
    assert [r.token_ids for r in rows] == [r.token_ids for r in alone]
    assert [r.forwards for r in rows] == [r.forwards for r in alone]
