"""tf.train.Example wire format and TFRecord framing for pretraining instances, without protobuf.

`serialize_batch` encodes a whole `InstanceBatch` with numpy: the bytes equal what
`tf.train.Example.SerializeToString()` writes for the same features (field order, varints,
packed int64/float lists), and with `tfrecord=True` each record also gets TFRecord framing
(length, masked CRC-32C of length and data) exactly as `tf.io.TFRecordWriter` writes it. No
TensorFlow import: this runs in create_pretraining_data's worker processes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from albert_tf.data.pretraining_instances import Instance, InstanceBatch, concat_ranges

FEATURE_NAMES_MASKED = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "token_boundary",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)
FEATURE_NAMES_UNMASKED = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "token_boundary",
    "next_sentence_labels",
)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _vlen(x: np.ndarray) -> np.ndarray:
    """Byte count of the varints of non-negative ints. int64 [N]."""
    x = np.asarray(x)
    n = np.ones(x.shape, np.int64)
    if x.size:
        for g in range(1, (int(x.max()).bit_length() + 6) // 7):
            n += x >= (1 << (7 * g))
    return n


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of non-negative ints [N], concatenated.

    -> (bytes uint8 [B], byte count per value int64 [N])."""
    v = np.asarray(values)
    if v.dtype.kind not in "iu":
        v = v.astype(np.int64)
    if v.size and v.min() < 0:
        raise ValueError("negative values cannot be written as varints here")
    nbytes = _vlen(v)
    width = int(nbytes.max(initial=1))
    at = np.cumsum(nbytes) - nbytes
    out = np.empty(int(nbytes.sum()) + width, np.uint8)
    # Every value writes all G byte slots, highest first: a slot past a value's last byte is
    # overwritten later by a lower slot of a following value (or lies in the cut-off tail).
    for g in range(width - 1, -1, -1):
        b = (v >> (7 * g)).astype(np.uint8) & np.uint8(0x7F)
        b |= (nbytes > g + 1).view(np.uint8) << np.uint8(7)  # continuation bit
        out[at + g] = b
    out = out[: out.shape[0] - width]
    return out, nbytes


def _fixed_prefix(name: str, kind_field: int, payload_len: int) -> bytes:
    """Map entry + Feature + list headers of a feature whose packed payload has a fixed length."""
    lst = _varint((1 << 3) | 2) + _varint(payload_len)  # XList.value (packed)
    feat = _varint((kind_field << 3) | 2) + _varint(len(lst) + payload_len)
    key = _varint((1 << 3) | 2) + _varint(len(name)) + name.encode("utf-8")
    inner = len(feat) + len(lst) + payload_len
    entry = key + _varint((2 << 3) | 2) + _varint(inner)
    return _varint((1 << 3) | 2) + _varint(len(entry) + inner) + entry + feat + lst


class _Crc32c:
    """CRC-32C (Castagnoli, as in TFRecord framing) of many records at once, in numpy.

    The CRC is affine in the message bits: crc(M) = zeros[len(M)] ^ XOR_i T[e_i][M[i]], where
    e_i is the number of bytes after byte i and T[e][b] is the CRC (init 0, no final xor) of b
    followed by e zero bytes. Zero bytes -- most of a padded example -- contribute nothing, and
    runs of a constant byte cost O(1) through prefix XORs of a column of T.
    """

    _POLY = 0x82F63B78
    MAX_CONST = 64  # longest constant piece (feature headers)

    def __init__(self):
        t = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            t = np.where(t & 1, (t >> 1) ^ np.uint32(self._POLY), t >> 1).astype(np.uint32)
        self.byte_table = t
        self.rows = 0
        self._consts: dict = {}
        self.grow(1024)

    def grow(self, rows: int) -> None:
        """Makes the tables cover messages of at least `rows` bytes."""
        if rows <= self.rows:
            return
        rows = max(rows, 2 * self.rows)
        t = self.byte_table
        tab = np.empty((rows + self.MAX_CONST + 4, 256), np.uint32)
        tab[0] = t
        for e in range(1, 4):  # one zero byte: c -> t[c & 0xFF] ^ (c >> 8)
            tab[e] = t[tab[e - 1] & 0xFF] ^ (tab[e - 1] >> 8)
        # Doubling: n more zero bytes map c to XOR_j T[n - 1 - j][byte j of c] (linearity).
        n = 4
        while n < tab.shape[0]:
            src = tab[: min(n, tab.shape[0] - n)]
            out = tab[n - 1][src & 0xFF]
            for j in range(1, 4):
                out ^= tab[n - 1 - j][(src >> (8 * j)) & 0xFF]
            tab[n : n + src.shape[0]] = out
            n += src.shape[0]
        self.table = tab
        self.flat = tab.ravel()
        # CRC of L zero bytes: the register 0xFFFFFFFF shifted by L zero bytes, inverted.
        zeros = np.empty(rows + 1, np.uint32)
        c = 0xFFFFFFFF
        for n in range(4):
            zeros[n] = c ^ 0xFFFFFFFF
            c = int(t[c & 0xFF]) ^ (c >> 8)
        zeros[4:] = ~(
            tab[3:rows, 0xFF]
            ^ tab[2 : rows - 1, 0xFF]
            ^ tab[1 : rows - 2, 0xFF]
            ^ tab[: rows - 3, 0xFF]
        )
        self.zeros = zeros
        # ones[x] = XOR of T[y][1] for y < x: a run of 0x01 bytes whose last byte has e bytes
        # after it and length l contributes ones[e + l] ^ ones[e].
        self.ones = np.concatenate([[0], np.bitwise_xor.accumulate(tab[:, 1])]).astype(np.uint32)
        # A float32 1.0 (00 00 80 3f) whose last byte is at e contributes f[e]; floats4[e] =
        # XOR of f[e + 4i], i >= 0, so m floats ending at e contribute floats4[e] ^ floats4[e+4m].
        f = np.zeros(rows + 8 * 4, np.uint32)
        f[: rows + 3] = tab[: rows + 3, 0x3F] ^ tab[1 : rows + 4, 0x80]
        for r in range(4):
            f[r::4] = np.bitwise_xor.accumulate(f[r::4][::-1])[::-1]
        self.floats4 = f
        self.rows = rows
        self._consts = {}

    def const(self, data: bytes) -> np.ndarray:
        """c[e]: contribution of `data` whose last byte has e bytes after it. uint32 [rows]."""
        c = self._consts.get(data)
        if c is None:
            if len(data) > self.MAX_CONST:
                raise ValueError(f"constant piece of {len(data)} bytes")
            c = np.zeros(self.rows, np.uint32)
            for j, b in enumerate(data):
                if b:
                    s = len(data) - 1 - j
                    c ^= self.table[s : s + self.rows, b]
            self._consts[data] = c
        return c

    def scattered(self, e: np.ndarray, values: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """XOR of T[e][value] per segment: values/e flat [sum(lens)], lens [K] -> uint32 [K]."""
        contrib = self.flat[(e << 8) | values]
        acc = np.zeros(contrib.shape[0] + 1, np.uint32)
        np.bitwise_xor.accumulate(contrib, out=acc[1:])
        ends = np.cumsum(lens)
        return acc[ends] ^ acc[ends - lens]

    @staticmethod
    def mask(crc: np.ndarray) -> np.ndarray:
        """TFRecord's masked CRC."""
        crc = crc.astype(np.uint32)
        return ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)


_CRC: list = []


def _crc() -> _Crc32c:
    if not _CRC:
        _CRC.append(_Crc32c())
    return _CRC[0]


class _RecordLayout:
    """Builds K records of varying length in one zero-initialized uint8 buffer.

    Pieces are appended in record order; each is zeros, a constant, a run of one byte value, or
    per-record content from a flat source. `finish` places them and computes the CRC-32C of every
    record when `tfrecord` (then the buffer holds TFRecord-framed records).
    """

    def __init__(self, num: int, tfrecord: bool):
        self.K = num
        self.tfrecord = tfrecord
        self.pieces: list = []  # (kind, lens int64 [K], payload)

    def _add(self, kind, lens, payload=None):
        self.pieces.append((kind, np.broadcast_to(np.asarray(lens, np.int64), (self.K,)), payload))

    def zeros(self, lens):
        self._add("zeros", lens)

    def const(self, data: bytes):
        self._add("const", len(data), data)

    def ones(self, lens):
        self._add("ones", lens)

    def floats_one(self, count):
        """`count` float32 1.0 values."""
        self._add("floats", 4 * np.asarray(count, np.int64))

    def content(self, flat: np.ndarray, lens):
        """Record k gets the next lens[k] bytes of `flat` (uint8, in record order)."""
        self._add("content", lens, flat)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """-> (buffer uint8 [total], record offsets int64 [K + 1])."""
        K = self.K
        head = 12 if self.tfrecord else 0  # uint64 length + masked CRC of the length
        tail = 4 if self.tfrecord else 0  # masked CRC of the data
        rel = np.zeros(K, np.int64)  # start of the next piece within the data
        starts = []
        for _, lens, _ in self.pieces:
            starts.append(rel.copy())
            rel += lens
        data_len = rel
        offsets = np.zeros(K + 1, np.int64)
        np.cumsum(data_len + head + tail, out=offsets[1:])
        base = offsets[:-1] + head  # absolute start of each record's data
        buf = np.zeros(int(offsets[-1]), np.uint8)
        crc = _crc() if self.tfrecord else None
        if crc is not None:
            crc.grow(int(data_len.max(initial=0)) + 1)
            acc = crc.zeros[data_len].copy()
        for (kind, lens, payload), rstart in zip(self.pieces, starts):
            start = base + rstart
            after = data_len - rstart - lens  # bytes after the piece's last byte
            if kind == "zeros":
                continue
            if kind == "const":
                n = len(payload)
                buf[start[:, None] + np.arange(n)] = np.frombuffer(payload, np.uint8)
                if crc is not None:
                    acc ^= crc.const(payload)[after]
            elif kind == "ones":
                buf[concat_ranges(start, lens)] = 1
                if crc is not None:
                    acc ^= crc.ones[after + lens] ^ crc.ones[after]
            elif kind == "floats":
                count = lens // 4
                at = np.repeat(start, count) + 4 * concat_ranges(np.zeros(K, np.int64), count)
                buf[at + 2] = 0x80  # float32 1.0 = 00 00 80 3f (little-endian)
                buf[at + 3] = 0x3F
                if crc is not None:
                    acc ^= crc.floats4[after] ^ crc.floats4[after + lens]
            else:
                excl = np.cumsum(lens) - lens
                step = np.arange(int(lens.sum()), dtype=np.int32)
                buf[np.repeat(start - excl, lens) + step] = payload
                if crc is not None:
                    # Table row of each byte: bytes after it in its record.
                    e = (
                        np.repeat((base + data_len - 1 - start + excl).astype(np.int32), lens)
                        - step
                    )
                    acc ^= crc.scattered(e, payload, lens)
        if crc is not None:
            hdr = data_len.astype("<u8").view(np.uint8).reshape(K, 8)
            lcrc = crc.zeros[8] ^ np.bitwise_xor.reduce(crc.table[7 - np.arange(8), hdr], axis=1)
            buf[offsets[:-1, None] + np.arange(8)] = hdr
            buf[offsets[:-1, None] + 8 + np.arange(4)] = (
                crc.mask(lcrc).astype("<u4").view(np.uint8).reshape(K, 4)
            )
            buf[(base + data_len)[:, None] + np.arange(4)] = (
                crc.mask(acc).astype("<u4").view(np.uint8).reshape(K, 4)
            )
        return buf, offsets


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sums of values[offsets[k]:offsets[k + 1]]. int64 [K]."""
    c = np.zeros(values.shape[0] + 1, np.int64)
    np.cumsum(values, out=c[1:])
    return c[offsets[1:]] - c[offsets[:-1]]


def _header(num: int, parts: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Per-record byte strings from constant bytes and varint fields (int arrays [num]).

    -> (bytes of all records concatenated uint8, length per record int64 [num])."""
    pieces = [
        (
            (np.tile(np.frombuffer(p, np.uint8), num), np.full(num, len(p), np.int64))
            if isinstance(p, bytes)
            else _varints(p)
        )
        for p in parts
    ]
    lens = np.stack([n for _, n in pieces], 1)  # [num, parts]
    total = lens.sum(1)
    at = (np.cumsum(total) - total)[:, None] + np.cumsum(lens, 1) - lens
    out = np.empty(int(total.sum()), np.uint8)
    for j, (flat, n) in enumerate(pieces):
        out[concat_ranges(at[:, j], n)] = flat
    return out, total


def _variable_entry(name: str, payload_len: np.ndarray):
    """Header of a feature map entry whose packed int64 payload has `payload_len` bytes.

    -> (header bytes flat, header lengths [K], total entry lengths [K])."""
    list_len = 1 + _vlen(payload_len) + payload_len  # Int64List
    feat_len = 1 + _vlen(list_len) + list_len  # Feature
    key = b"\x0a" + _varint(len(name)) + name.encode("utf-8")
    entry_len = len(key) + 1 + _vlen(feat_len) + feat_len  # Features.feature map entry
    flat, lens = _header(
        payload_len.shape[0],
        [b"\x0a", entry_len, key + b"\x12", feat_len, b"\x1a", list_len, b"\x0a", payload_len],
    )
    return flat, lens, 1 + _vlen(entry_len) + entry_len


def serialize_batch(
    batch: InstanceBatch,
    max_seq_length: int,
    max_predictions_per_seq: int,
    with_masks: bool = True,
    tfrecord: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """tf.train.Example bytes of every instance of `batch`, padded, with the original's features
    (spec §8.7); with `tfrecord`, each framed as a TFRecord (length, CRC-32C) ready to append
    to a .tfrecord file.

    input_ids/input_mask/segment_ids/token_boundary: int64 [max_seq_length], zero-padded.
    masked_lm_positions/masked_lm_ids: int64 [max_predictions_per_seq], masked_lm_weights: float
    (1.0 real / 0.0 pad) -- omitted when `with_masks` is False. next_sentence_labels: int64 [1].
    Returns (bytes uint8 [total], record offsets int64 [K + 1]).
    """
    S, P = max_seq_length, max_predictions_per_seq
    K = len(batch)
    n = np.diff(batch.offsets)
    if K and n.max() > S:
        raise ValueError(f"instance of length {int(n.max())} exceeds max_seq_length={S}")
    pad = S - n
    ids_bytes, ids_vlen = _varints(batch.input_ids)
    ids_payload = _segment_sums(ids_vlen, batch.offsets) + pad
    ids_head, ids_head_len, ids_entry = _variable_entry("input_ids", ids_payload)
    fixed = {
        name: _fixed_prefix(name, 3, S) for name in ("input_mask", "segment_ids", "token_boundary")
    }
    label_prefix = _fixed_prefix("next_sentence_labels", 3, 1)
    body = ids_entry + sum(len(p) + S for p in fixed.values()) + len(label_prefix) + 1
    if with_masks:
        m = np.diff(batch.mask_offsets)
        if K and m.max() > P:
            raise ValueError(f"{int(m.max())} predictions exceed max_predictions_per_seq={P}")
        masked = []
        for name, values in (
            ("masked_lm_positions", batch.masked_lm_positions),
            ("masked_lm_ids", batch.masked_lm_ids),
        ):
            flat, vlen = _varints(values)
            payload = _segment_sums(vlen, batch.mask_offsets)
            head, head_len, entry = _variable_entry(name, payload + P - m)
            masked.append((head, head_len, flat, payload))
            body = body + entry
        weights_prefix = _fixed_prefix("masked_lm_weights", 2, 4 * P)
        body = body + len(weights_prefix) + 4 * P
    top, top_len = _header(K, [b"\x0a", body])  # Example.features

    out = _RecordLayout(K, tfrecord)
    out.content(top, top_len)
    out.content(ids_head, ids_head_len)
    out.content(ids_bytes, ids_payload - pad)
    out.zeros(pad)
    out.const(fixed["input_mask"])
    out.ones(n)
    out.zeros(pad)
    out.const(fixed["segment_ids"])
    out.zeros(batch.a_len + 2)
    out.ones(n - batch.a_len - 2)
    out.zeros(pad)
    out.const(fixed["token_boundary"])
    out.content(batch.token_boundary, n)
    out.zeros(pad)
    if with_masks:
        for head, head_len, flat, payload in masked:
            out.content(head, head_len)
            out.content(flat, payload)
            out.zeros(P - m)
        out.const(weights_prefix)
        out.floats_one(m)
        out.zeros(4 * (P - m))
    out.const(label_prefix)
    out.content(np.asarray(batch.next_sentence_labels, np.uint8), 1)
    return out.finish()


def serialize_example(
    inst: Instance, max_seq_length: int, max_predictions_per_seq: int, with_masks: bool = True
) -> bytes:
    """tf.train.Example bytes of one padded instance; see `serialize_batch`."""
    batch = InstanceBatch.from_instances([inst])
    return serialize_batch(batch, max_seq_length, max_predictions_per_seq, with_masks)[0].tobytes()


def example_bytes(example) -> bytes:
    """The bytes of a tf.train.Example proto, the same in every process.

    Its features are a protobuf map, and the upb protobuf runtime writes map entries in
    an order that changes from process to process: the same features gave different
    file bytes on every run (the records parse to equal examples). Deterministic
    serialization writes the entries sorted by feature name.
    """
    return example.SerializeToString(deterministic=True)
