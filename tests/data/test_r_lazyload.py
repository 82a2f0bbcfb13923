"""albert_tf/data/r_lazyload.py against R serializations written here byte by byte from the
format's description (R Internals, "Serialization formats"), as R writes a data set."""

import gzip
import struct
import zlib

import pytest

from albert_tf.data import r_lazyload

HAS_ATTR, HAS_TAG = 1 << 9, 1 << 10
UTF8 = 1 << 15  # the CHARSXP's encoding bit (levels 8) in the flags word


def i32(*values):
    return struct.pack(f">{len(values)}i", *values)


def header(version=3):
    out = b"X\n" + i32(version, 0x040201, 0x030500)
    return out + (i32(5) + b"UTF-8" if version == 3 else b"")


def charsxp(text):
    if text is None:
        return i32(9, -1)
    data = text.encode("utf-8")
    return i32(9 | UTF8, len(data)) + data


def strsxp(values, flags=0):
    return i32(16 | flags, len(values)) + b"".join(charsxp(v) for v in values)


def symbol(name):
    return i32(1) + charsxp(name)


def names_attribute(names):
    """A pairlist holding one tagged cell: names = <character vector>."""
    return i32(2 | HAS_TAG) + symbol("names") + strsxp(names) + i32(254)


def test_character_vector_with_na_and_utf8():
    data = header() + strsxp(["It is a truth", None, "Mrs. Bennet’s"])
    assert r_lazyload.unserialize(data) == ["It is a truth", None, "Mrs. Bennet’s"]


def test_version_2_header_and_numbers():
    ints = i32(13, 3, 7, -(2**31), -2)
    reals = i32(14, 2) + struct.pack(">2d", 0.5, -3.25)
    logicals = i32(10, 2, 1, 0)
    assert r_lazyload.unserialize(header(2) + ints) == [7, None, -2]
    assert r_lazyload.unserialize(header(2) + reals) == [0.5, -3.25]
    assert r_lazyload.unserialize(header(2) + logicals) == [True, False]


def test_named_list_and_reference_to_a_symbol():
    # list(a = "x", b = 1:2) with a second "names" symbol written as a reference (REFSXP 1).
    body = i32(19 | HAS_ATTR, 2) + strsxp(["x"]) + i32(13, 2, 1, 2) + names_attribute(["a", "b"])
    assert r_lazyload.unserialize(header() + body) == {"a": ["x"], "b": [1, 2]}
    # list(<symbol names>, list(k = <"v" with attribute names = "n">)): the attribute's tag
    # is written as a reference (REFSXP, index 1) to the symbol read before it.
    tagged = strsxp(["v"], HAS_ATTR) + i32(2 | HAS_TAG) + i32(255 | (1 << 8)) + strsxp(["n"])
    tagged += i32(254)
    named = i32(19 | HAS_ATTR, 1) + tagged + names_attribute(["k"])
    data = header() + i32(19, 2) + symbol("names") + named
    assert r_lazyload.unserialize(data) == ["names", {"k": ["v"]}]


def test_lazyload_database():
    emma = header() + strsxp(["EMMA", "", "CHAPTER I"])
    persuasion = header() + strsxp(["Persuasion"])
    rdb, variables = b"", []
    for blob in (emma, persuasion):
        chunk = struct.pack(">I", len(blob)) + zlib.compress(blob)
        variables.append((len(rdb), len(chunk)))
        rdb += chunk
    pairs = b"".join(i32(13, 2, offset, length) for offset, length in variables)
    index = (
        header()
        + i32(19 | HAS_ATTR, 2)
        + i32(19 | HAS_ATTR, 2)
        + pairs
        + names_attribute(["emma", "persuasion"])
        + i32(254)  # references: NULL
        + names_attribute(["variables", "references"])
    )
    out = r_lazyload.read_lazyload(gzip.compress(index), rdb)
    assert out == {"emma": ["EMMA", "", "CHAPTER I"], "persuasion": ["Persuasion"]}


def test_not_a_data_type_and_not_xdr():
    with pytest.raises(ValueError, match="type 3 at byte"):
        r_lazyload.unserialize(header() + i32(3))  # a closure
    with pytest.raises(ValueError, match="not an R XDR serialization"):
        r_lazyload.unserialize(b"A\n" + i32(3))
