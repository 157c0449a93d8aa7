"""DiffusionGemma (google/diffusiongemma-26B-A4B-it): uniform-state block diffusion run by transformers' own
generate. Its options default to the release's generation_config.json (docs/decoders.md §8); it always samples, each
call seeded from its rows' own seeds."""

from __future__ import annotations

import torch

from models.family import Family, LMEvalAlias, ModelSpec, TinyModel
from models.tokenizer import TokenizerSpec

# DiffusionGemma (Gemma 4's tokenizer and template): <|turn>role\n...<turn|>\n with the assistant as "model", a
# leading <bos>; with thinking on, a system turn opens with <|think|>; with it off, the generation prompt carries an
# empty thought channel. The specials in the release's order: <pad> 0, <eos> 1, <bos> 2 (their released ids too),
# then <unk>, <mask>, <|tool_response>, <|think|>, <|channel>, <channel|>, <|turn>, <turn|>.
GEMMA4_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set thinking = enable_thinking is defined and enable_thinking %}"
    "{% set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else none %}"
    "{% if thinking or system is not none %}"
    "<|turn>system\n{% if thinking %}<|think|>\n{% endif %}{{ (system or '') | trim }}<turn|>\n"
    "{% endif %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] | trim }}<turn|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% if not thinking %}<|channel>thought\n<channel|>{% endif %}"
    "{% endif %}"
)

GEMMA4_TOKENIZER = TokenizerSpec(
    special_tokens=("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|tool_response>", "<|think|>", "<|channel>",
                    "<channel|>", "<|turn>", "<turn|>"),
    eos_token="<eos>",
    pad_token="<pad>",
    mask_token="<mask>",
    bos_token="<bos>",
    chat_template=GEMMA4_CHAT_TEMPLATE,
)


def _tiny_diffusion_gemma(tokenizer, seed: int):
    """DiffusionGemma in the release's format (text and vision configs, the release's generation_config.json with
    this tokenizer's ids): 2 layers, sliding then full attention (the last must be full), a 4-expert top-2 mixture,
    the tiny vision tower the config requires, and a 16-token canvas (the release's is 256) so CPU tests stay short."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from models.decoders.diffusion_gemma import DiffusionGemmaOptions, generation_config

    ids = tokenizer.convert_tokens_to_ids
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                layer_types=["sliding_attention", "full_attention"], sliding_window=64, num_experts=4,
                top_k_experts=2, moe_intermediate_size=32, max_position_embeddings=4096,
                pad_token_id=ids("<pad>"), eos_token_id=ids("<eos>"), bos_token_id=ids("<bos>"))
    vision = dict(model_type="gemma4_vision", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, head_dim=16)
    torch.manual_seed(seed)
    network = DiffusionGemmaForBlockDiffusion(
        DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=16)).eval()
    release = DiffusionGemmaOptions(max_new_tokens=256, eos_ids=tuple(ids(["<eos>", "<turn|>", "<|tool_response>"])),
                                    pad_id=ids("<pad>"))  # the options' defaults are the release's generation config
    network.generation_config = generation_config(release)
    return network


FAMILY = Family(
    name="diffusiongemma",
    adapters={"diffusiongemma": "models.adapters.diffusion_gemma:DiffusionGemmaAdapter"},
    tiny=(TinyModel("tiny-diffusiongemma", GEMMA4_TOKENIZER, _tiny_diffusion_gemma),),
    models=(
        ModelSpec("diffusiongemma", "diffusiongemma", "google/diffusiongemma-26B-A4B-it",
                  "DiffusionGemma-26B-A4B-it: uniform-state block diffusion on canvases of 256, transformers' own "
                  "generate, sampled (the release's schedule: 48 steps, T 0.8 -> 0.4, entropy bound 0.1)"),
        ModelSpec("tiny-diffusiongemma", "diffusiongemma", "tiny-diffusiongemma",
                  "offline: random tiny DiffusionGemma (canvas 16) with a local Gemma-4-style tokenizer"),
    ),
    lm_eval=(LMEvalAlias("diffusiongemma", "diffusiongemma", "DiffusionGemmaLM"),),
)
