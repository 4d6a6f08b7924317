"""The simulated model's greedy output: token ids that are a pure function of the prompt.

Why deterministic: the canary's output check compares the tokens of an offload hit, a GPU hit and a
recompute of the same prompt, so the simulator must give the same answer to the same prompt whichever
cache served it, and a different answer when the prompt differs anywhere (`prompt`), or only when its
last token differs (`last-token`, what a model with dummy weights does: the check must see that it
cannot tell). A load served from a corrupted tier (`corrupt-loads`) answers other tokens.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

DEPENDS_ON = ("prompt", "last-token", "random", "drift")
"""What the output depends on: the whole prompt (default), only its last token, nothing reproducible (every id
random: a server whose greedy answers differ even without a tier), or the prompt and the time (`drift`: the
answers to one prompt change every DRIFT_REQUESTS requests the engine serves)."""
DRIFT_REQUESTS = 25
"""Requests per answer epoch of `drift`: slower than a GPU revisit and its repeat, faster than a run."""
LOW, HIGH = 1000, 30000
"""Output token ids lie in [LOW, HIGH), like the canary's prompt ids."""


def _digest(tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(array("q", tokens).tobytes(), digest_size=16).digest()


def output_ids(prompt: Sequence[int], max_tokens: int, depends_on: str = "prompt", nonce: int = 0) -> tuple[int, ...]:
    """Greedy tokens: position i's id from a hash of the prompt (or its last token), `nonce` (the drift epoch, or
    a random number for `random`) and i."""
    if depends_on not in DEPENDS_ON:
        raise ValueError(f"output depends on one of {', '.join(DEPENDS_ON)}, not {depends_on!r}")
    seed = _digest(prompt if depends_on != "last-token" else prompt[-1:])
    if depends_on in ("random", "drift"):
        seed += nonce.to_bytes(8, "little", signed=False)
    out = []
    for i in range(max_tokens):
        h = hashlib.blake2b(seed + i.to_bytes(4, "little"), digest_size=8).digest()
        out.append(LOW + int.from_bytes(h, "little") % (HIGH - LOW))
    return tuple(out)


def corrupt(ids: Sequence[int]) -> tuple[int, ...]:
    """What a request reading a corrupted KV block answers: every token different (and still in range)."""
    return tuple(LOW + (t - LOW + 7919) % (HIGH - LOW) for t in ids)
