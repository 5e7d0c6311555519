"""A tiny model made locally for the end-to-end tests: nothing is downloaded.

``make_llama(dir)`` writes a 2-layer Llama-architecture checkpoint (random float32 weights from a fixed
seed, ``model.safetensors`` + ``config.json``) and a word-level tokenizer trained offline on a
made-up vocabulary (``tokenizer.json``). The weights are random, so the answers are nonsense, but
greedy decoding is deterministic: the same prompt gives the same output ids whether its KV comes
from prefill or from any cache tier, which is what the tests compare.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB_WORDS = 1000
"""Words in the tokenizer's vocabulary (w0 .. w999), plus the special tokens."""


def words(count: int, seed: int) -> list[str]:
    """``count`` vocabulary words, the same for the same seed (a prompt is ``" ".join(words(...))``)."""
    import random

    rng = random.Random(seed)
    return [f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(count)]


def _write_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>", "<pad>"], min_frequency=1)
    tokenizer.train_from_iterator([" ".join(f"w{i}" for i in range(VOCAB_WORDS))], trainer=trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": 4096,
        "add_bos_token": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"})
    )
    return int(tokenizer.get_vocab_size())


def make_llama(out: Path, seed: int = 0) -> Path:
    """Write the tiny Llama model into ``out`` (created) and return it; idempotent."""
    if (out / "model.safetensors").exists():
        return out
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    vocab = _write_tokenizer(out)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        for param in model.parameters():  # larger than the default init: logits that differ clearly
            param.normal_(0.0, 0.2)
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def make_deepseek(out: Path, seed: int = 0) -> Path:
    """A tiny DeepSeek-V3-architecture (MLA) model: 2 dense layers (no MoE layer), the same
    word-level tokenizer; idempotent."""
    if (out / "model.safetensors").exists():
        return out
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    vocab = _write_tokenizer(out)
    config = DeepseekV3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        first_k_dense_replace=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        kv_lora_rank=32,
        q_lora_rank=None,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        num_mtp_layers=0,
    )
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    model.save_pretrained(str(out), safe_serialization=True)
    return out
