#!/usr/bin/env python3
"""Build side: cut the bundle's xz parts into N equal byte chunks for the device calls (stdlib only).

    python3 chunks.py OUTROOT N PART...   -> OUTROOT/c1/{chunk.1,MANIFEST} ... OUTROOT/cN/{chunk.N,MANIFEST}

Why: every device call carries at most 64 MiB (working tree included), and the parts are unpacked into
/tmp there as soon as all the bytes they span have arrived (burst.py bundle). Each chunk dir carries the
whole MANIFEST (build id, chunk and part offsets, SHA-256), so any call can check what it got.
"""

import hashlib
import os
import sys
import time
from pathlib import Path


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def main(outroot, n, parts):
    n = int(n)
    total = sum(os.path.getsize(p) for p in parts)
    cs = -(-total // n)
    build = time.strftime("%Y%m%dT%H%M%S") + "-" + sha256(parts[0])[:12]
    lines, off = [f"build {build}"], 0
    plines = []
    for p in parts:
        sz = os.path.getsize(p)
        plines.append(f"part {os.path.basename(p)} {off} {sz} {sha256(p)}")
        off += sz
    blob = b"".join(Path(p).read_bytes() for p in parts)
    for i in range(n):
        d = os.path.join(outroot, f"c{i + 1}")
        os.makedirs(d, exist_ok=True)
        piece = blob[i * cs : (i + 1) * cs]
        fp = os.path.join(d, f"chunk.{i + 1}")
        with open(fp, "wb") as f:
            f.write(piece)
        lines.append(f"chunk {i + 1} {i * cs} {len(piece)} {sha256(fp)}")
    text = "\n".join(lines + plines) + "\n"
    for i in range(n):
        with open(os.path.join(outroot, f"c{i + 1}", "MANIFEST"), "w") as f:
            f.write(text)
    print(text, end="")
    print(f"{n} chunks of <= {cs} B from {total} B")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
