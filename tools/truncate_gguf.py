"""Write a copy of a GGUF file that keeps only its first K layers.

The GPU machine takes at most 64 MiB of files per run, and the default model
(SmolLM2-135M, ~94 MB) does not fit; its first layers do. The copy keeps every
metadata entry byte for byte except `<arch>.block_count`, and every tensor not
of a dropped layer. Real weights, real activation statistics, fewer layers:
good enough to compare the CPU and CUDA backends on real data.

usage: python tools/truncate_gguf.py IN.gguf OUT.gguf K
"""
from __future__ import annotations

import struct
import sys

import numpy as np
from gguf import GGUFReader


def main(src: str, dst: str, keep: int) -> None:
    r = GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    align = 32
    if "general.alignment" in r.fields:
        align = int(r.fields["general.alignment"].parts[-1][0])
    kv = []
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        parts = [np.asarray(p).copy() for p in f.parts]
        if name == f"{arch}.block_count":
            parts[-1] = parts[-1].copy()
            parts[-1][0] = keep
        kv.append(b"".join(p.tobytes() for p in parts))
    tensors = [t for t in r.tensors
               if not (t.name.startswith("blk.") and int(t.name.split(".")[1]) >= keep)]
    infos, offs, off = [], [], 0
    for t in tensors:
        nb = int(t.n_bytes)
        offs.append(off)
        name = t.name.encode()
        dims = [int(x) for x in t.shape]
        infos.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) +
                     struct.pack("<IQ", int(t.tensor_type), off))
        off += (nb + align - 1) // align * align
    with open(dst, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
        for b in kv:
            out.write(b)
        for b in infos:
            out.write(b)
        pos = out.tell()
        out.write(b"\0" * ((pos + align - 1) // align * align - pos))
        base = out.tell()
        for t, o in zip(tensors, offs):
            out.seek(base + o)
            out.write(np.asarray(t.data).tobytes())
        out.truncate(base + off)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
