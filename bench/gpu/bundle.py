#!/usr/bin/env python3
"""Move the vLLM bundle parts to the GPU machine in byte-chunks and unpack them there (stdlib only).

Each device `run` may carry at most 64 MiB (working tree included), and only /tmp survives between
consecutive commands. So the xz parts are concatenated and cut into equal chunks (one per command);
on the GPU machine every command stores its chunk under STORE/chunks/ and each part is unpacked into
STORE as soon as all chunks it spans are there.

Build side (build_bundle.sh):
    bundle.py make   OUTROOT BUILD_ID N PART...   -> OUTROOT/c1/{chunk.1,MANIFEST} ... OUTROOT/cN/...
    bundle.py single OUTDIR  BUILD_ID PART        -> OUTDIR/{PART,MANIFEST}  (a part that travels whole)
GPU side (device_step.sh):
    bundle.py load   STORE DIR...    take the chunk / whole part found in each DIR, unpack every part
                                     that became complete; exit 0 ok, 5 checksum mismatch, 6 build-id
                                     mismatch with what STORE already holds (start again from step 1),
                                     7 unpack error
    bundle.py status STORE [PART...] exit 0 if the named parts (default: all parts of the chunk
                                     manifest) are unpacked, 4 if not
STORE layout: MANIFEST (the chunk manifest), chunks/chunk.K, done/<part> (unpacked), site/ over/ xdeps/.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time

BUF = 1 << 22


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(BUF), b""):
            h.update(b)
    return h.hexdigest()


def read_manifest(path):
    m = {"build": None, "chunk_size": None, "chunks": {}, "parts": {}, "order": []}
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            if w[0] == "build":
                m["build"] = w[1]
            elif w[0] == "chunk_size":
                m["chunk_size"] = int(w[1])
            elif w[0] == "chunk":
                m["chunks"][int(w[1])] = (int(w[2]), w[3])
            elif w[0] == "part":
                m["parts"][w[1]] = (int(w[2]), int(w[3]), w[4])
                m["order"].append(w[1])
            elif w[0] == "whole":
                m["whole"] = (w[1], int(w[2]), w[3])
    return m


# ----------------------------------------------------------------------------------------- build side
def make(outroot, build_id, n, partfiles):
    n = int(n)
    total = sum(os.path.getsize(p) for p in partfiles)
    cs = -(-total // n)
    head = [
        "# bundle parts cut into byte-chunks (bench/gpu/bundle.py); offsets into the concatenation",
        f"build {build_id}",
        f"chunk_size {cs}",
    ]
    part_lines, off = [], 0
    for p in partfiles:
        sz = os.path.getsize(p)
        part_lines.append(f"part {os.path.basename(p)} {off} {sz} {sha256_file(p)}")
        off += sz
    ci, written, out = 0, cs, None
    for p in partfiles:
        with open(p, "rb") as f:
            for b in iter(lambda: f.read(BUF), b""):
                while b:
                    if written >= cs:
                        if out:
                            out.close()
                        ci += 1
                        d = os.path.join(outroot, f"c{ci}")
                        os.makedirs(d, exist_ok=True)
                        out = open(os.path.join(d, f"chunk.{ci}"), "wb")  # noqa: SIM115 (closed at the next chunk)
                        written = 0
                    k = min(len(b), cs - written)
                    out.write(b[:k])
                    written += k
                    b = b[k:]
    out.close()
    chunk_lines = []
    for i in range(1, ci + 1):
        fp = os.path.join(outroot, f"c{i}", f"chunk.{i}")
        chunk_lines.append(f"chunk {i} {os.path.getsize(fp)} {sha256_file(fp)}")
    text = "\n".join(head + chunk_lines + part_lines) + "\n"
    for i in range(1, ci + 1):
        with open(os.path.join(outroot, f"c{i}", "MANIFEST"), "w") as f:
            f.write(text)
    print(f"{ci} chunks of <= {cs} B from {total} B ({', '.join(os.path.basename(p) for p in partfiles)})")


def single(outdir, build_id, part):
    os.makedirs(outdir, exist_ok=True)
    dst = os.path.join(outdir, os.path.basename(part))
    shutil.copyfile(part, dst)
    with open(os.path.join(outdir, "MANIFEST"), "w") as f:
        f.write(
            f"# one bundle part that travels whole (bench/gpu/bundle.py)\nbuild {build_id}\n"
            f"whole {os.path.basename(part)} {os.path.getsize(dst)} {sha256_file(dst)}\n"
        )
    print(f"{dst}: {os.path.getsize(dst)} B")


# ------------------------------------------------------------------------------------------- GPU side
def _log(msg):
    print(f"[bundle] {msg}", flush=True)


def _extract_stream(reader, store):
    """Unpack an xz tar stream (a generator of byte blocks) into store; returns sha256 of the stream."""
    h = hashlib.sha256()
    if shutil.which("xz") and shutil.which("tar"):
        p = subprocess.Popen(["tar", "-xJf", "-", "-C", store], stdin=subprocess.PIPE)
        try:
            for b in reader:
                h.update(b)
                p.stdin.write(b)
        finally:
            p.stdin.close()
        if p.wait() != 0:
            raise RuntimeError(f"tar exited {p.returncode}")
        return h.hexdigest()

    class _R:  # file-like over the generator, for tarfile's stream mode
        def __init__(self, gen):
            self.gen, self.buf = gen, b""

        def read(self, n=-1):
            while n < 0 or len(self.buf) < n:
                try:
                    b = next(self.gen)
                except StopIteration:
                    break
                h.update(b)
                self.buf += b
            if n < 0:
                out, self.buf = self.buf, b""
            else:
                out, self.buf = self.buf[:n], self.buf[n:]
            return out

    r = _R(iter(reader))
    with tarfile.open(fileobj=r, mode="r|xz") as tf:
        tf.extractall(store, filter="tar") if hasattr(tarfile, "data_filter") else tf.extractall(store)
    while r.read(BUF):  # hash any trailing bytes
        pass
    return h.hexdigest()


def _chunk_reader(chunk_dir, cs, off, sz):
    pos, left = off, sz
    while left > 0:
        i = pos // cs + 1
        with open(os.path.join(chunk_dir, f"chunk.{i}"), "rb") as f:
            f.seek(pos - (i - 1) * cs)
            n = min(left, i * cs - pos)
            while n > 0:
                b = f.read(min(BUF, n))
                if not b:
                    raise RuntimeError(f"short chunk {i}")
                yield b
                n -= len(b)
                pos += len(b)
                left -= len(b)


def _file_reader(path):
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(BUF), b"")


def _unpack(name, reader, sha, store, done_dir, what):
    """Unpack one part, check its sha256 and mark it done; 0, or load's exit code (7 unpack, 5 sha)."""
    t = time.time()
    try:
        got = _extract_stream(reader, store)
    except Exception as e:
        _log(f"{name}: unpack failed: {e!r}")
        return 7
    if got != sha:
        _log(f"{name}: sha256 MISMATCH")
        return 5
    with open(os.path.join(done_dir, name), "w") as f:
        f.write(f"{time.time():.0f}\n")
    _log(f"{name}: {what} unpacked in {time.time() - t:.1f}s")
    return 0


def load(store, dirs):
    store = os.path.abspath(store)
    chunk_dir, done_dir = os.path.join(store, "chunks"), os.path.join(store, "done")
    os.makedirs(chunk_dir, exist_ok=True)
    os.makedirs(done_dir, exist_ok=True)
    smf = os.path.join(store, "MANIFEST")
    for d in dirs:
        mf = os.path.join(d, "MANIFEST")
        if not os.path.isfile(mf):
            _log(f"{d}: no MANIFEST here (not carried?)")
            return 8
        m = read_manifest(mf)
        have = read_manifest(smf)["build"] if os.path.exists(smf) else None
        if have and have != m["build"]:
            _log(f"{d}: build {m['build']} but {store} holds build {have}: start again from step 1")
            return 6
        if "whole" in m:  # a part that travels whole (p3)
            name, sz, sha = m["whole"]
            if os.path.exists(os.path.join(done_dir, name)):
                _log(f"{name}: already unpacked")
                continue
            rc = _unpack(name, _file_reader(os.path.join(d, name)), sha, store, done_dir, f"{sz} B")
            if rc:
                return rc
            continue
        if not os.path.exists(smf):
            shutil.copyfile(mf, smf)
        for i in sorted(m["chunks"]):
            src = os.path.join(d, f"chunk.{i}")
            if not os.path.exists(src):
                continue
            dst = os.path.join(chunk_dir, f"chunk.{i}")
            sz, sha = m["chunks"][i]
            if os.path.exists(dst) and os.path.getsize(dst) == sz:
                _log(f"chunk {i}: already stored")
                continue
            t = time.time()
            shutil.copyfile(src, dst + ".tmp")
            got = sha256_file(dst + ".tmp")
            if got != sha or os.path.getsize(dst + ".tmp") != sz:
                os.remove(dst + ".tmp")
                _log(f"chunk {i}: sha256 MISMATCH ({got})")
                return 5
            os.replace(dst + ".tmp", dst)
            _log(f"chunk {i}: {sz} B stored, sha256 OK ({time.time() - t:.1f}s)")
    if not os.path.exists(smf):
        return 0
    m = read_manifest(smf)
    cs = m["chunk_size"]
    for name in m["order"]:
        if os.path.exists(os.path.join(done_dir, name)):
            continue
        off, sz, sha = m["parts"][name]
        first, last = off // cs + 1, (off + sz - 1) // cs + 1
        missing = [i for i in range(first, last + 1) if not os.path.exists(os.path.join(chunk_dir, f"chunk.{i}"))]
        if missing:
            _log(f"{name}: waits for chunk(s) {missing}")
            continue
        rc = _unpack(
            name, _chunk_reader(chunk_dir, cs, off, sz), sha, store, done_dir, f"{sz} B from chunk(s) {first}..{last}"
        )
        if rc:
            return rc
    # chunks whose parts are all unpacked are no longer needed
    for i in sorted(m["chunks"]):
        lo, hi = (i - 1) * cs, i * cs
        spans = [n for n in m["order"] if m["parts"][n][0] < hi and m["parts"][n][0] + m["parts"][n][1] > lo]
        if spans and all(os.path.exists(os.path.join(done_dir, n)) for n in spans):
            try:
                os.remove(os.path.join(chunk_dir, f"chunk.{i}"))
            except OSError:
                pass
    return 0


def status(store, names):
    store = os.path.abspath(store)
    smf = os.path.join(store, "MANIFEST")
    if not names:
        if not os.path.exists(smf):
            print("no MANIFEST in", store)
            return 4
        names = read_manifest(smf)["order"]
    missing = [n for n in names if not os.path.exists(os.path.join(store, "done", n))]
    print("unpacked:", [n for n in names if n not in missing], "missing:", missing)
    return 4 if missing else 0


if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(a[0], a[1], a[2], a[3:])
    elif cmd == "single":
        single(a[0], a[1], a[2])
    elif cmd == "load":
        sys.exit(load(a[0], a[1:]))
    elif cmd == "status":
        sys.exit(status(a[0], a[1:]))
    else:
        sys.exit(f"unknown command {cmd}")
