#!/usr/bin/python3
"""Copy a GGUF file, replacing tokenizer.ggml.model = "none" with a dummy SentencePiece
vocabulary (<unk>, <s>, </s>, 256 byte tokens, then t<i>) of {arch}.vocab_size tokens.

  /usr/bin/python3 tests/gguf/add_dummy_vocab.py IN.gguf OUT.gguf

For the manual llama.cpp cross-check only (tests/gguf/README.md): node-llama-cpp
tokenizes while loading a model and asserts on a file without a tokenizer, which
llama.cpp itself runs. Metadata is added; the tensor infos and data are copied unchanged.
"""
import struct
import sys


def main():
    src, dst = sys.argv[1], sys.argv[2]
    data = open(src, "rb").read()
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t):
        nonlocal pos
        if t == 8:
            n = rd("<Q")
            pos += n
        elif t == 9:
            et, n = rd("<I"), rd("<Q")
            for _ in range(n):
                skip(et)
        else:
            pos += sizes[t]

    assert data[:4] == b"GGUF"
    pos = 4
    version, n_tensors, n_kv = rd("<I"), rd("<Q"), rd("<Q")
    kvs, arch, vocab, align = [], None, None, 32
    for _ in range(n_kv):
        start = pos
        key = data[pos + 8:pos + 8 + struct.unpack_from("<Q", data, pos)[0]].decode()
        pos += 8 + len(key.encode())
        t = rd("<I")
        vstart = pos
        skip(t)
        if key == "general.architecture":
            arch = data[vstart + 8:pos].decode()
        if key.endswith(".vocab_size"):
            vocab = struct.unpack_from("<I", data, vstart)[0]
        if key == "general.alignment":
            align = struct.unpack_from("<I", data, vstart)[0]
        if not key.startswith("tokenizer."):
            kvs.append(data[start:pos])
    infos_start = pos
    for _ in range(n_tensors):
        n = rd("<Q")
        pos += n
        nd = rd("<I")
        pos += 8 * nd + 4 + 8
    infos = data[infos_start:pos]
    data_start = (pos + align - 1) // align * align

    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    def kv_str(k, v):
        return s(k) + struct.pack("<I", 8) + s(v)

    def kv_arr(k, et, items):
        return s(k) + struct.pack("<IIQ", 9, et, len(items)) + b"".join(items)

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"t{i}" for i in range(len(tokens), vocab)]
    tokens = tokens[:vocab]
    types = [2, 3, 3] + [6] * 256 + [1] * max(0, vocab - 259)
    kvs.append(kv_str("tokenizer.ggml.model", "llama"))
    kvs.append(kv_arr("tokenizer.ggml.tokens", 8, [s(t) for t in tokens]))
    kvs.append(kv_arr("tokenizer.ggml.scores", 6, [struct.pack("<f", -float(i)) for i in range(vocab)]))
    kvs.append(kv_arr("tokenizer.ggml.token_type", 5, [struct.pack("<i", t) for t in types[:vocab]]))
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % align)
    open(dst, "wb").write(head + data[data_start:])
    print(f"{dst}: {arch}, dummy vocabulary of {vocab} tokens")


if __name__ == "__main__":
    main()
