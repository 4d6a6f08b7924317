# mypy: ignore-errors
# (runs on the GPU host with torch and safetensors from vLLM's environment; neither is installed where mypy runs)
"""Seeded random weights for a Qwen3 shape, written as a real checkpoint beside its config.json.

    python tools/gpuref/weights.py CONFIG_DIR DEST [--seed 7] [--qk-gain 3.0]

Why: with `--load-format dummy` a model's greedy answer depends on its last prompt token only, so the
product's output check cannot see a corrupted prefix and says `unverifiable`. These weights make the answer
depend on the whole prompt while keeping the numerics of a real model:

- every matrix is N(0, 1/fan_in) (activations of order 1, as in a trained model; no float overflow to hide
  or create differences), embeddings N(0, 1), norms 1;
- Qwen3 normalises queries and keys per head (`q_norm`, `k_norm`), so their scale is set by those gains:
  `--qk-gain` g makes the attention logits' standard deviation about g², so each query reads a few positions
  of the prompt and a changed token anywhere reaches the last position within a few layers (with gains of 1
  attention is nearly uniform and one token among thousands moves the answer by too little to change it).

Drawn on the GPU when there is one (a 14B shape is 30 GB of bfloat16), else on the CPU: the same seed gives
the same weights on the same kind of device.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

EMB_STD = 0.05
"""Embeddings small beside what attention and the MLPs add, so the last position's state is mostly what it read
from the prompt rather than its own token (layers normalise their input, so this scales nothing else)."""


def tensors(cfg: dict, seed: int, qk_gain: float, emb_std: float = EMB_STD) -> dict[str, torch.Tensor]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(seed)
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, heads, kv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def rnd(rows: int, cols: int, std: float | None = None) -> torch.Tensor:
        t = torch.randn(rows, cols, generator=g, device=device) * (std if std is not None else cols**-0.5)
        return t.to(torch.bfloat16).cpu()

    def ones(n: int, gain: float = 1.0) -> torch.Tensor:
        return torch.full((n,), gain, dtype=torch.bfloat16)

    w = {"model.embed_tokens.weight": rnd(vocab, h, emb_std), "model.norm.weight": ones(h)}
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = rnd(vocab, h, 1.0)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = rnd(heads * hd, h)
        w[p + "self_attn.k_proj.weight"] = rnd(kv * hd, h)
        w[p + "self_attn.v_proj.weight"] = rnd(kv * hd, h)
        w[p + "self_attn.o_proj.weight"] = rnd(h, heads * hd)
        w[p + "self_attn.q_norm.weight"] = ones(hd, qk_gain)
        w[p + "self_attn.k_norm.weight"] = ones(hd, qk_gain)
        w[p + "mlp.gate_proj.weight"] = rnd(inter, h)
        w[p + "mlp.up_proj.weight"] = rnd(inter, h)
        w[p + "mlp.down_proj.weight"] = rnd(h, inter)
        w[p + "input_layernorm.weight"] = ones(h)
        w[p + "post_attention_layernorm.weight"] = ones(h)
    return w


def write(config_dir: Path, dest: Path, seed: int = 7, qk_gain: float = 3.0) -> dict[str, float]:
    """The checkpoint in `dest` (config files copied from `config_dir`); returns what was written."""
    t0 = time.monotonic()
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "generation_config.json"):
        if (config_dir / name).exists():
            shutil.copyfile(config_dir / name, dest / name)
    cfg = json.loads((config_dir / "config.json").read_text(encoding="utf-8"))
    w = tensors(cfg, seed, qk_gain)
    save_file(w, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return {
        "seed": seed,
        "qk_gain": qk_gain,
        "parameters": float(sum(t.numel() for t in w.values())),
        "bytes": float((dest / "model.safetensors").stat().st_size),
        "seconds": round(time.monotonic() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("config_dir", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--qk-gain", type=float, default=3.0)
    a = p.parse_args(argv)
    print(json.dumps(write(a.config_dir, a.dest, a.seed, a.qk_gain)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
