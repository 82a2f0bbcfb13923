"""Reads the data objects of an R package's lazy-load database (`data/Rdata.rdx` and
`data/Rdata.rdb`), the form in which R packages, and Debian's r-cran-* packages, ship
their data sets. Pure Python: no R and no third-party reader.

The index (`.rdx`) is a gzip-compressed R serialization of a list whose `variables`
element maps each object's name to an integer pair (offset, length) into the `.rdb`
file. There each object is a 4-byte big-endian uncompressed length followed by a zlib
stream of the object's R serialization (XDR, format version 2 or 3).

Only the R types that data sets are made of are decoded: NULL, logical, integer,
double and character vectors, lists, pairlists (attributes) and symbols. A vector
comes back as a Python list (character: `str`, NA: None); a list with a `names`
attribute as a dict; other attributes are dropped. Any other type raises ValueError
naming it.
"""

from __future__ import annotations

import gzip
import struct
import zlib

# R's SEXP type codes (R internals, "Serialization formats").
_NIL, _SYM, _LIST, _CHAR, _LGL, _INT, _REAL, _STR, _VEC = 0, 1, 2, 9, 10, 13, 14, 16, 19
_NILVALUE, _REF = 254, 255
_NA_INT = -(2**31)


class _Reader:
    """One R serialization (after its 2-byte "X\\n" format marker)."""

    def __init__(self, data: bytes):
        if data[:2] != b"X\n":
            raise ValueError(f"not an R XDR serialization (starts {data[:2]!r})")
        self.data, self.pos, self.refs = data, 2, []
        version = self.int()
        self.pos += 8  # the writer's and the minimal reader's R versions
        if version == 3:
            name_length = self.int()
            self.pos += name_length  # the native encoding's name
        elif version != 2:
            raise ValueError(f"R serialization format version {version}: expected 2 or 3")

    def int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def length(self) -> int:
        n = self.int()
        if n == -1:  # a long vector: two more ints
            upper, lower = self.int(), self.int()
            n = (upper << 32) + lower
        return n

    def item(self):
        flags = self.int()
        kind = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind == _NILVALUE:
            return None
        if kind == _REF:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if kind == _SYM:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == _LIST:  # a pairlist: (tag, value) cells
            out = {}
            while True:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out[tag if tag is not None else len(out)] = self.item()
                flags = self.int()
                if flags & 0xFF != _LIST:
                    self.pos -= 4
                    self.item()  # the end of the chain (NULL)
                    return out
                has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind == _CHAR:
            n = self.int()
            if n == -1:
                return None
            text = self.data[self.pos : self.pos + n].decode("utf-8", errors="replace")
            self.pos += n
            return text
        if kind in (_LGL, _INT, _REAL, _STR, _VEC, _NIL):
            value = self._vector(kind)
            attributes = self.item() if has_attr else {}
            names = attributes.get("names") if isinstance(attributes, dict) else None
            if kind == _VEC and names is not None:
                return dict(zip(names, value))
            return value
        raise ValueError(f"R object of type {kind} at byte {self.pos - 4}: not a data type")

    def _vector(self, kind):
        if kind == _NIL:
            return None
        n = self.length()
        if kind in (_STR, _VEC):
            return [self.item() for _ in range(n)]
        code = "d" if kind == _REAL else "i"
        values = list(struct.unpack_from(f">{n}{code}", self.data, self.pos))
        self.pos += n * struct.calcsize(code)
        if kind != _REAL:
            values = [None if v == _NA_INT else v for v in values]
        return [bool(v) if v is not None else None for v in values] if kind == _LGL else values


def unserialize(data: bytes):
    """The Python value of one R XDR serialization (see the module docstring)."""
    return _Reader(data).item()


def read_lazyload(index_bytes: bytes, database_bytes: bytes) -> dict:
    """name -> Python value of every object of a lazy-load database, from the bytes of its
    `.rdx` (gzip) and `.rdb` files."""
    index = unserialize(gzip.decompress(index_bytes))
    out = {}
    for name, (offset, length) in index["variables"].items():
        chunk = database_bytes[offset : offset + length]
        (size,) = struct.unpack_from(">I", chunk)
        data = zlib.decompress(chunk[4:])
        if len(data) != size:
            raise ValueError(f"object {name!r}: {len(data)} bytes, its header says {size}")
        out[name] = unserialize(data)
    return out


__all__ = ["unserialize", "read_lazyload"]
