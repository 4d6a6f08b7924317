"""What the engine itself does with greedy answers, measured beside the product's output check.

    python tools/gpuref/answers.py URL MODEL OUT.json [--prompts 20] [--tokens 2048] [--seed 0]

For each of `--prompts` random prompts (token ids, no tokenizer needed) it asks three greedy answers
(temperature 0, seed 0, 8 tokens, `return_token_ids`):

- `cold`: the prompt computed from scratch (a fresh prompt: nothing cached);
- `cached`: the same prompt again, its prefix read from the GPU prefix cache (the server says how many
  prompt tokens were cached);
- `changed`: the prompt with its first token changed, computed from scratch.

Against a server without a connector, `cached` vs `cold` is the tolerance the product's recompute pair
needs on this engine (a cached and a recomputed prefix may differ in their last bits); `changed` vs
`cold` says whether the model's answer depends on the start of the prompt at all (the product's
sensitivity probe asks the same). Standard library only: this measures the engine, not the product.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import urllib.request
from typing import Any


def ask(url: str, model: str, prompt: list[int], timeout: float = 120.0) -> tuple[list[int], int]:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": 8,
        "temperature": 0,
        "seed": 0,
        "return_token_ids": True,
    }
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        doc = json.load(r)
    ids = doc["choices"][0].get("token_ids") or []
    details = (doc.get("usage") or {}).get("prompt_tokens_details") or {}
    return [int(i) for i in ids], int(details.get("cached_tokens") or 0)


def measure(
    url: str, model: str, prompts: int, tokens: int, seed: int, role: str = "", vocab: int = 32000
) -> dict[str, Any]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(prompts):
        prompt = [rng.randrange(100, vocab) for _ in range(tokens)]
        cold, cold_cached = ask(url, model, prompt)
        cached, cached_tokens = ask(url, model, prompt)
        changed_prompt = [(prompt[0] + 1 + rng.randrange(vocab - 200)) % vocab or 1, *prompt[1:]]
        changed, _ = ask(url, model, changed_prompt)
        rows.append(
            {
                "prompt": i,
                "cold": cold,
                "cached": cached,
                "changed": changed,
                "cold_cached_tokens": cold_cached,
                "cached_tokens": cached_tokens,
                "cached_equal": cached == cold,
                "first_token_equal": cached[:1] == cold[:1],
                "sensitive": changed != cold,
            }
        )
    hits = [r for r in rows if r["cached_tokens"] > 0]
    return {
        "url_role": role,
        "prompts": prompts,
        "prompt_tokens": tokens,
        "cached_hits": len(hits),
        "cached_equal": sum(r["cached_equal"] for r in hits),
        "first_token_equal": sum(r["first_token_equal"] for r in hits),
        "sensitive": sum(r["sensitive"] for r in rows),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--role", default="")
    a = p.parse_args(argv)
    doc = measure(a.url, a.model, a.prompts, a.tokens, a.seed, a.role)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    keys = ("prompts", "cached_hits", "cached_equal", "first_token_equal", "sensitive")
    print(json.dumps({k: doc[k] for k in keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
