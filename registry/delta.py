"""Lossless deltas between two versions' weights, verified on reconstruction.

    delta = encode(parent, child)            # {name: Tensor} each: the served weights of a version and its parent
    write_delta(folder, delta)               # delta.json (the manifest) + delta.bin (the payloads)
    child = apply(parent, read_delta(folder))   # every tensor's SHA-256 checked: DeltaMismatch on any difference

A tensor is its safetensors dtype, shape and raw bytes (`Tensor`; `read_safetensors` / `write_safetensors`), so a
delta is exact to the bit in any precision, bf16 included. Per tensor the manifest records one of:

    same     bit-identical to the parent's tensor of that name: nothing stored
    xor      the XOR of the two bit patterns, zstd-compressed (mostly zero bytes when few elements changed)
    sparse   the changed elements: their positions as gaps from the previous one, then their new bit patterns,
             zstd-compressed (smaller than xor when few elements changed in a large tensor)
    full     the tensor itself, zstd-compressed: new in the child, or its dtype or shape changed

xor and sparse are both tried; the smaller is kept. Each entry carries the SHA-256 of the child's tensor bytes, and
the manifest the tensors the child no longer has. `apply` rebuilds every tensor, compares its digest before
returning anything, and raises DeltaMismatch naming the first tensor that differs (a corrupted payload, or a delta
applied to a parent it was not made from).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

FORMAT = 1
MANIFEST = "delta.json"
PAYLOAD = "delta.bin"
KINDS = ("same", "xor", "sparse", "full")
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
            "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class DeltaMismatch(ValueError):
    """A reconstructed tensor's bytes do not match the digest the delta recorded (or the delta is malformed)."""


@dataclass(frozen=True)
class Tensor:
    dtype: str                 # safetensors' dtype name: "BF16", "F32", ...
    shape: tuple[int, ...]
    data: bytes

    def __post_init__(self):
        if self.dtype not in ITEMSIZE:
            raise ValueError(f"unsupported dtype {self.dtype!r}")
        if len(self.data) != ITEMSIZE[self.dtype] * int(np.prod(self.shape, dtype=np.int64)):
            raise ValueError(f"{len(self.data)} bytes do not hold a {self.dtype} tensor of shape {self.shape}")

    def bits(self) -> np.ndarray:
        """The elements' bit patterns as unsigned integers of the element's width (a read-only view)."""
        return np.frombuffer(self.data, dtype=_UINT[ITEMSIZE[self.dtype]])


@dataclass
class Entry:
    name: str
    dtype: str
    shape: list[int]
    kind: str
    sha256: str                # of the child's tensor bytes
    changed: int = 0           # elements whose bits differ from the parent's (all of them for "full")
    offset: int = 0            # the compressed payload's place in delta.bin
    length: int = 0
    raw_length: int = 0        # the payload before compression


@dataclass
class Delta:
    entries: list[Entry]
    removed: list[str] = field(default_factory=list)
    payload: bytes = b""
    format: int = FORMAT
    codec: str = "zstd"

    @property
    def stored_bytes(self) -> int:
        """What shipping this delta moves: the payload (the manifest is a few hundred bytes a tensor)."""
        return len(self.payload)

    @property
    def full_bytes(self) -> int:
        """The child's weights, uncompressed."""
        return sum(ITEMSIZE[e.dtype] * int(np.prod(e.shape, dtype=np.int64)) for e in self.entries)

    @property
    def changed_elements(self) -> int:
        return sum(e.changed for e in self.entries)

    def manifest(self) -> dict:
        return {"format": self.format, "codec": self.codec, "removed": self.removed,
                "entries": [asdict(e) for e in self.entries]}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _codec():
    import pyarrow as pa

    return pa.Codec("zstd", compression_level=3)


def _sparse_payload(xor: np.ndarray, child_bits: np.ndarray) -> tuple[bytes, int]:
    where = np.flatnonzero(xor)
    gaps = np.diff(where, prepend=-1).astype(np.uint32 if child_bits.size < 2**32 else np.uint64)
    return gaps.tobytes() + child_bits[where].tobytes(), int(where.size)


def encode(parent: dict[str, Tensor], child: dict[str, Tensor]) -> Delta:
    """The delta that turns `parent` into `child` (either may hold tensors the other lacks)."""
    codec = _codec()
    entries, chunks, offset = [], [], 0
    for name in sorted(child):
        t = child[name]
        base = parent.get(name)
        entry = Entry(name, t.dtype, list(t.shape), "full", digest(t.data))
        if base is not None and (base.dtype, tuple(base.shape)) == (t.dtype, tuple(t.shape)):
            if base.data == t.data:
                entry.kind = "same"
                entries.append(entry)
                continue
            b = t.bits()
            x = np.bitwise_xor(base.bits(), b)          # nonzero exactly where the bits differ
            xor = x.tobytes()
            sparse, entry.changed = _sparse_payload(x, b)
            packed = {kind: codec.compress(raw, asbytes=True) for kind, raw in (("xor", xor), ("sparse", sparse))}
            kind = min(packed, key=lambda k: (len(packed[k]), k))
            raw_len = len(xor) if kind == "xor" else len(sparse)
            entry.kind, data = kind, packed[kind]
        else:
            raw_len, data = len(t.data), codec.compress(t.data, asbytes=True)
            entry.changed = t.bits().size
        entry.offset, entry.length, entry.raw_length = offset, len(data), raw_len
        chunks.append(data)
        offset += len(data)
        entries.append(entry)
    return Delta(entries, sorted(set(parent) - set(child)), b"".join(chunks))


def _decoded(entry: Entry, delta: Delta, codec) -> bytes:
    end = entry.offset + entry.length
    if entry.offset < 0 or end > len(delta.payload):
        raise DeltaMismatch(f"tensor {entry.name}: its payload [{entry.offset}, {end}) lies outside delta.bin "
                            f"({len(delta.payload)} bytes)")
    try:
        raw = codec.decompress(delta.payload[entry.offset:end], decompressed_size=entry.raw_length, asbytes=True)
    except Exception as e:  # noqa: BLE001 - pyarrow raises OSError/ArrowInvalid on a corrupted frame
        raise DeltaMismatch(f"tensor {entry.name}: its payload does not decompress ({e})") from None
    if len(raw) != entry.raw_length:
        raise DeltaMismatch(f"tensor {entry.name}: {len(raw)} bytes decompressed, {entry.raw_length} recorded")
    return raw


def _rebuilt(entry: Entry, base: Tensor | None, delta: Delta, codec) -> bytes:
    if entry.kind not in KINDS:
        raise DeltaMismatch(f"tensor {entry.name}: unknown kind {entry.kind!r}")
    if entry.kind == "full":
        return _decoded(entry, delta, codec)
    if base is None or (base.dtype, list(base.shape)) != (entry.dtype, list(entry.shape)):
        raise DeltaMismatch(f"tensor {entry.name}: the parent has no {entry.dtype} tensor of shape {entry.shape} "
                            "to apply it to")
    if entry.kind == "same":
        return base.data
    raw = _decoded(entry, delta, codec)
    bits = base.bits()
    if entry.kind == "xor":
        if len(raw) != len(base.data):
            raise DeltaMismatch(f"tensor {entry.name}: an XOR of {len(raw)} bytes for {len(base.data)}")
        return np.bitwise_xor(bits, np.frombuffer(raw, dtype=bits.dtype)).tobytes()
    gap_type = np.uint32 if bits.size < 2**32 else np.uint64
    n = entry.changed
    gaps_len = n * np.dtype(gap_type).itemsize
    if gaps_len + n * bits.itemsize != len(raw):
        raise DeltaMismatch(f"tensor {entry.name}: {len(raw)} sparse bytes for {n} changed elements")
    where = np.cumsum(np.frombuffer(raw[:gaps_len], dtype=gap_type).astype(np.int64)) - 1
    if n and (where[0] < 0 or where[-1] >= bits.size):
        raise DeltaMismatch(f"tensor {entry.name}: a changed position lies outside the tensor")
    out = bits.copy()
    out[where] = np.frombuffer(raw[gaps_len:], dtype=bits.dtype)
    return out.tobytes()


def apply(parent: dict[str, Tensor], delta: Delta) -> dict[str, Tensor]:
    """The child's tensors, each checked against its recorded SHA-256 before any is returned."""
    if delta.format != FORMAT or delta.codec != "zstd":
        raise DeltaMismatch(f"delta format {delta.format} with codec {delta.codec!r}: this reader knows format "
                            f"{FORMAT} with zstd")
    codec = _codec()
    out: dict[str, Tensor] = {}
    for entry in delta.entries:
        data = _rebuilt(entry, parent.get(entry.name), delta, codec)
        if digest(data) != entry.sha256:
            raise DeltaMismatch(f"tensor {entry.name}: the reconstructed bytes do not match the recorded SHA-256 "
                                f"(a corrupted delta, or one made against another parent)")
        out[entry.name] = Tensor(entry.dtype, tuple(entry.shape), data)
    return out


def write_delta(folder: Path, delta: Delta) -> Path:
    """delta.bin, then delta.json (the manifest, written last: a folder without it holds no delta)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PAYLOAD).write_bytes(delta.payload)
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(delta.manifest(), indent=1))
    tmp.replace(folder / MANIFEST)
    return folder


def read_delta(folder: Path) -> Delta:
    folder = Path(folder)
    try:
        m = json.loads((folder / MANIFEST).read_text())
        entries = [Entry(**e) for e in m["entries"]]
        return Delta(entries, list(m.get("removed", [])), (folder / PAYLOAD).read_bytes(), int(m["format"]),
                     str(m["codec"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DeltaMismatch(f"{folder}: not a readable delta ({type(e).__name__}: {e})") from None


def read_safetensors(path: Path) -> dict[str, Tensor]:
    """A safetensors file's tensors as raw bytes (bit-exact in every dtype): an 8-byte little-endian header length,
    the JSON header (each tensor's dtype, shape and byte range in the data), then the data."""
    body = Path(path).read_bytes()
    try:
        n = int.from_bytes(body[:8], "little")
        header = json.loads(body[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: not a safetensors file ({e})") from None
    data = memoryview(body)[8 + n:]
    return {name: Tensor(h["dtype"], tuple(h["shape"]), bytes(data[h["data_offsets"][0]:h["data_offsets"][1]]))
            for name, h in header.items() if name != "__metadata__"}


def write_safetensors(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> Path:
    """The tensors in the safetensors layout (in name order; the header padded to 8 bytes), written atomically."""
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(t.data)]}
        offset += len(t.data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in sorted(tensors):
            f.write(tensors[name].data)
    tmp.replace(path)
    return path
