"""Hand-written safetensors reader/writer (numpy only).

File layout: u64 little-endian N, then N bytes of JSON header, then the data.
The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}
(offsets relative to the first byte after the header) and may hold a
"__metadata__" dict of string -> string.

BF16 is handled by bit manipulation: reading widens to float32 exactly,
writing rounds float32 to nearest-even.
"""

import json
import os
import struct
from collections import OrderedDict

import numpy as np

# safetensors dtype name -> (numpy storage dtype, bytes per element)
_STORAGE = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("u1"), 1),
}

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


class SafetensorsError(ValueError):
    pass


# ---------------------------------------------------------------- bf16 helpers

def bf16_bits_to_f32(bits):
    """uint16 array of bf16 bit patterns -> float32 array (exact)."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even.
    NaN stays NaN (quiet)."""
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = x.view(np.uint32).astype(np.uint64)
    lsb = (u >> np.uint64(16)) & np.uint64(1)
    rounded = ((u + np.uint64(0x7FFF) + lsb) >> np.uint64(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> np.uint64(16)).astype(np.uint16) | np.uint16(0x0040))
    return rounded


def round_to_bf16(x):
    """float array -> float32 array holding the bf16-rounded values."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


# ---------------------------------------------------------------- reading

def read_header(path):
    """Return (header dict without __metadata__, metadata dict, data_start, file_size)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: file shorter than 8 bytes")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8 or n > 100 * 1024 * 1024:
            raise SafetensorsError(f"{path}: header length {n} exceeds file size {size}")
        text = f.read(n)
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=OrderedDict)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: bad JSON header: {e}")
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_start = 8 + n
    data_len = size - data_start
    # validate entries; offsets must tile [0, data_len) without gaps or overlap
    spans = []
    for name, info in header.items():
        try:
            dt = info["dtype"]
            shape = [int(s) for s in info["shape"]]
            b, e = (int(v) for v in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name!r}: malformed header entry {info!r}")
        if dt not in _STORAGE:
            raise SafetensorsError(f"{path}: tensor {name!r}: unsupported dtype {dt}")
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        want = numel * _STORAGE[dt][1]
        if e - b != want or b < 0:
            raise SafetensorsError(
                f"{path}: tensor {name!r}: data_offsets [{b},{e}] hold {e - b} bytes, "
                f"dtype {dt} shape {shape} needs {want}")
        if e > data_len:
            raise SafetensorsError(
                f"{path}: tensor {name!r}: data_offsets end {e} is past the data section "
                f"({data_len} bytes; file truncated?)")
        spans.append((b, e, name))
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise SafetensorsError(f"{path}: tensor {name!r} starts at {b}, expected {pos} (gap or overlap)")
        pos = e
    if pos != data_len:
        raise SafetensorsError(f"{path}: tensors cover {pos} bytes but data section is {data_len}")
    return header, metadata, data_start, size


def load_file(path, upcast_bf16=True):
    """Read every tensor of one .safetensors file.

    Returns (tensors, dtypes, metadata): tensors is an OrderedDict name -> numpy
    array (BF16 widened to float32 when upcast_bf16, else raw uint16 bits;
    F16 stays float16), dtypes maps name -> safetensors dtype string."""
    header, metadata, data_start, _ = read_header(path)
    with open(path, "rb") as f:
        f.seek(data_start)
        data = f.read()
    tensors, dtypes = OrderedDict(), OrderedDict()
    for name, info in header.items():
        dt = info["dtype"]
        shape = tuple(int(s) for s in info["shape"])
        b, e = info["data_offsets"]
        arr = np.frombuffer(data, dtype=_STORAGE[dt][0], count=(e - b) // _STORAGE[dt][1], offset=b)
        arr = arr.reshape(shape)
        if dt == "BF16" and upcast_bf16:
            arr = bf16_bits_to_f32(arr)
        elif dt == "BOOL":
            arr = arr.astype(bool)
        else:
            arr = arr.copy()
        tensors[name] = arr
        dtypes[name] = dt
    return tensors, dtypes, metadata


def load_dir(model_dir, upcast_bf16=True):
    """Read all tensors of a Hugging Face model directory: sharded (index json
    with weight_map), a single model.safetensors, or else every *.safetensors.
    Returns (tensors, dtypes)."""
    index_path = os.path.join(model_dir, INDEX_NAME)
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise SafetensorsError(f"{index_path}: missing or empty weight_map")
        files = sorted(set(weight_map.values()))
    elif os.path.exists(os.path.join(model_dir, SINGLE_NAME)):
        weight_map, files = None, [SINGLE_NAME]
    else:
        weight_map = None
        files = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
        if not files:
            raise SafetensorsError(f"{model_dir}: no safetensors files")
    tensors, dtypes = OrderedDict(), OrderedDict()
    for fn in files:
        t, d, _ = load_file(os.path.join(model_dir, fn), upcast_bf16=upcast_bf16)
        for name in t:
            if name in tensors:
                raise SafetensorsError(f"{model_dir}: tensor {name!r} appears in more than one file")
            if weight_map is not None and weight_map.get(name) != fn:
                raise SafetensorsError(
                    f"{model_dir}: tensor {name!r} found in {fn} but weight_map says {weight_map.get(name)!r}")
            tensors[name], dtypes[name] = t[name], d[name]
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise SafetensorsError(f"{model_dir}: weight_map lists tensors not found in shards: {missing[:5]}")
    return tensors, dtypes


# ---------------------------------------------------------------- writing

def _encode(arr, dt):
    """numpy array -> (bytes, shape) stored as safetensors dtype dt."""
    arr = np.asarray(arr)
    if dt == "BF16":
        if arr.dtype == np.uint16:
            raw = arr  # already bf16 bits
        else:
            raw = f32_to_bf16_bits(arr.astype(np.float32))
    elif dt == "BOOL":
        raw = arr.astype(np.uint8)
    else:
        raw = arr.astype(_STORAGE[dt][0])
    return np.ascontiguousarray(raw).tobytes(), list(arr.shape)


def tensor_nbytes(arr, dt):
    return int(np.prod(np.shape(arr), dtype=np.int64)) * _STORAGE[dt][1]


def save_file(tensors, path, dtype="F32", metadata=None):
    """Write tensors (name -> numpy array) to path. dtype is one safetensors
    dtype string for all tensors, or a dict name -> dtype string."""
    header = OrderedDict()
    if metadata is None:
        metadata = {"format": "pt"}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, pos = [], 0
    for name, arr in tensors.items():
        dt = dtype[name] if isinstance(dtype, dict) else dtype
        if dt not in _STORAGE:
            raise SafetensorsError(f"cannot write dtype {dt}")
        blob, shape = _encode(arr, dt)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(blob)]}
        blobs.append(blob)
        pos += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)  # pad so that data starts 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def save_sharded(tensors, model_dir, n_shards, dtype="F32", metadata=None):
    """Split tensors (in order) across n_shards files named like HF's
    model-0000i-of-0000n.safetensors and write model.safetensors.index.json."""
    names = list(tensors)
    if n_shards < 1 or n_shards > len(names):
        raise SafetensorsError(f"cannot split {len(names)} tensors into {n_shards} shards")
    sizes = [tensor_nbytes(tensors[n], dtype[n] if isinstance(dtype, dict) else dtype) for n in names]
    total = sum(sizes)
    # contiguous split by cumulative byte size; fall back to equal counts
    groups = [[] for _ in range(n_shards)]
    acc = 0
    for n, s in zip(names, sizes):
        k = min(n_shards - 1, (acc * n_shards) // total) if total else 0
        groups[k].append(n)
        acc += s
    if not all(groups):
        groups = [[names[i] for i in idx] for idx in np.array_split(np.arange(len(names)), n_shards)]
    assert len(groups) == n_shards and all(groups)
    weight_map = OrderedDict()
    for i, g in enumerate(groups):
        fn = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file(OrderedDict((n, tensors[n]) for n in g), os.path.join(model_dir, fn), dtype, metadata)
        for n in g:
            weight_map[n] = fn
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(model_dir, INDEX_NAME), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return weight_map
