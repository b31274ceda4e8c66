"""A bounded GGUF reader: metadata and tensor table, every length checked against the file before it is read.

GGUF (llama.cpp's format): magic "GGUF", version (2 or 3), tensor count, metadata count, the metadata
(key, type, value), the tensor table (name, dims, ggml type, offset), padding to `general.alignment`, then
the tensor data. The value and tensor type tables are the `gguf` package's (gguf.constants); the walk over
the header is ours because gguf.GGUFReader trusts the lengths it reads (an array claiming 2⁶³ entries loops
that many times, a string past the end comes back short). Nothing here allocates more than the file holds.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from attnlab.model.checkpoint import CheckpointError
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_STRING = 16 * 2**20  # bytes in one metadata string (a chat template is kilobytes)
MAX_ARRAY = 16 * 2**20  # entries in one metadata array (a vocabulary is ~10⁵)
MAX_COUNT = 2**20  # metadata entries, tensors
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32
SCALARS = {  # value type → (struct format, numpy dtype)
    GGUFValueType.UINT8: ("<B", np.uint8), GGUFValueType.INT8: ("<b", np.int8),
    GGUFValueType.UINT16: ("<H", np.uint16), GGUFValueType.INT16: ("<h", np.int16),
    GGUFValueType.UINT32: ("<I", np.uint32), GGUFValueType.INT32: ("<i", np.int32),
    GGUFValueType.FLOAT32: ("<f", np.float32), GGUFValueType.BOOL: ("<?", np.bool_),
    GGUFValueType.UINT64: ("<Q", np.uint64), GGUFValueType.INT64: ("<q", np.int64),
    GGUFValueType.FLOAT64: ("<d", np.float64),
}


class GGUFError(CheckpointError):
    """A file that is not a GGUF file we can read; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy order (GGUF's dims reversed): [rows …, ne0]
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class GGUFFile:
    """The header of one GGUF file: metadata (plain Python values; scalar arrays as numpy) and tensors."""

    path: Path
    size: int
    version: int
    metadata: dict = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError(f"{self.path.name}: no general.architecture in its metadata")
        return arch

    def raw(self, info: TensorInfo) -> np.ndarray:
        """The tensor's bytes as uint8 [rows …, bytes per row] (a copy; the file is closed again)."""
        with open(self.path, "rb") as f:
            f.seek(info.offset)
            buf = f.read(info.nbytes)
        if len(buf) != info.nbytes:
            raise GGUFError(f"{self.path.name}: tensor {info.name} ends past the end of the file")
        block, size = GGML_QUANT_SIZES[info.qtype]
        row = info.shape[-1] // block * size
        return np.frombuffer(buf, np.uint8).reshape(*info.shape[:-1], row)  # [rows …, row bytes]


class _Cursor:
    """Reads little-endian values from a buffer, refusing any read past its end."""

    def __init__(self, buf, name: str):
        self.buf, self.pos, self.name, self.end = buf, 0, name, len(buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise GGUFError(f"{self.name}: {what} needs {n} bytes at offset {self.pos}, past the end of the "
                            f"file ({self.end} bytes); the file is truncated or not a GGUF file")

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str, limit: int = MAX_STRING) -> str:
        n = self.unpack("<Q", what + " length")
        if n > limit:
            raise GGUFError(f"{self.name}: {what} claims {n} bytes (at most {limit} allowed)")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{self.name}: {what} is not UTF-8") from None

    def value(self, vtype: int, key: str, nested: bool = False):
        if vtype == GGUFValueType.STRING:
            return self.string(f"metadata {key!r}")
        if vtype in SCALARS:
            return self.unpack(SCALARS[vtype][0], f"metadata {key!r}")
        if vtype == GGUFValueType.ARRAY and not nested:
            return self.array(key)
        raise GGUFError(f"{self.name}: metadata {key!r} has value type {vtype}, which GGUF does not define"
                        + (" (nested arrays are not supported)" if vtype == GGUFValueType.ARRAY else ""))

    def array(self, key: str):
        itype = self.unpack("<I", f"metadata {key!r} item type")
        n = self.unpack("<Q", f"metadata {key!r} length")
        least = 8 if itype == GGUFValueType.STRING else struct.calcsize(SCALARS[itype][0]) if itype in SCALARS else 1
        if n > MAX_ARRAY or n * least > self.end - self.pos:
            raise GGUFError(f"{self.name}: metadata {key!r} claims {n} entries, more than the file can hold "
                            f"(at most {min(MAX_ARRAY, (self.end - self.pos) // least)})")
        if itype in SCALARS:
            dtype = np.dtype(SCALARS[itype][1]).newbyteorder("<")
            raw = bytes(self.buf[self.pos:self.pos + n * dtype.itemsize])  # a copy: no view into the file stays
            self.pos += n * dtype.itemsize
            return np.frombuffer(raw, dtype).copy()
        return [self.value(itype, key, nested=True) for _ in range(n)]


def read_gguf(path: str | Path) -> GGUFFile:
    """Parse the header of a GGUF file (metadata, tensor table) without reading tensor data."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < 24:
                raise GGUFError(f"{path.name}: {size} bytes is too short for a GGUF file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _parse(path, size, memoryview(mm))
    except OSError as e:
        raise GGUFError(f"{path.name}: cannot read the file ({e.strerror or e})") from None


def _parse(path: Path, size: int, buf: memoryview) -> GGUFFile:
    try:
        c = _Cursor(buf, path.name)
        if bytes(buf[:4]) != MAGIC:
            raise GGUFError(f"{path.name} is not a GGUF file (it does not start with 'GGUF')")
        c.pos = 4
        version = c.unpack("<I", "version")
        if version & 0xFFFF == 0:
            raise GGUFError(f"{path.name} is a big-endian GGUF file; only little-endian files are supported")
        if version not in VERSIONS:
            raise GGUFError(f"{path.name}: GGUF version {version} is not supported (only {VERSIONS})")
        n_tensors, n_kv = c.unpack("<Q", "tensor count"), c.unpack("<Q", "metadata count")
        for what, n, least in (("metadata entries", n_kv, 13), ("tensors", n_tensors, 24)):
            if n > MAX_COUNT or n * least > size:
                raise GGUFError(f"{path.name} claims {n} {what}, more than the file can hold (truncated or corrupt)")
        meta = {}
        for _ in range(n_kv):
            key = c.string("metadata key", limit=65536)
            vtype = c.unpack("<I", f"metadata {key!r} type")
            if key in meta:
                raise GGUFError(f"{path.name}: metadata {key!r} appears twice")
            meta[key] = c.value(vtype, key)
        infos = [_tensor_info(c) for _ in range(n_tensors)]
        align = meta.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1) or align > 2**16:
            raise GGUFError(f"{path.name}: general.alignment={align!r} is not a power of two ≤ 65536")
        start = -(-c.pos // align) * align
        tensors = {}
        for name, dims, qtype, offset in infos:
            if name in tensors:
                raise GGUFError(f"{path.name}: tensor {name!r} appears twice")
            tensors[name] = _place(path.name, size, start, align, name, dims, qtype, offset)
        return GGUFFile(path, size, version, meta, tensors)
    finally:
        buf.release()


def _tensor_info(c: _Cursor) -> tuple[str, tuple[int, ...], int, int]:
    name = c.string("tensor name", limit=65536)
    n_dims = c.unpack("<I", f"tensor {name!r} dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"{c.name}: tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    dims = tuple(c.unpack("<Q", f"tensor {name!r} shape") for _ in range(n_dims))
    qtype = c.unpack("<I", f"tensor {name!r} type")
    offset = c.unpack("<Q", f"tensor {name!r} offset")
    return name, dims, qtype, offset


def _place(fname: str, size: int, start: int, align: int, name: str, dims: tuple[int, ...], qtype: int,
           offset: int) -> TensorInfo:
    """Check one tensor's type, shape and byte range against the file; GGUF dims are reversed into numpy order."""
    try:
        qt = GGMLQuantizationType(qtype)
    except ValueError:
        raise GGUFError(f"{fname}: tensor {name!r} has ggml type {qtype}, which is not a known type") from None
    if any(d == 0 for d in dims):
        raise GGUFError(f"{fname}: tensor {name!r} has an empty dimension {dims}")
    block, type_size = GGML_QUANT_SIZES[qt]
    if dims[0] % block:
        raise GGUFError(f"{fname}: tensor {name!r} rows of {dims[0]} are not whole {qt.name} blocks of {block}")
    n = int(np.prod(dims, dtype=object))
    nbytes = n // block * type_size
    if offset % align:
        raise GGUFError(f"{fname}: tensor {name!r} data offset {offset} is not aligned to {align}")
    if start + offset + nbytes > size:
        raise GGUFError(f"{fname}: tensor {name!r} ({nbytes} bytes at {start + offset}) runs past the end of "
                        f"the file ({size} bytes); the file is truncated")
    return TensorInfo(name, qt, tuple(reversed(dims)), start + offset, nbytes)
