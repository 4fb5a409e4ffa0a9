"""The tar codec's corner cases: numbers beyond octal, read back as written."""

from __future__ import annotations

import io

from rocmforge.assemble.image.tarcodec import REG, TarEntry, TarReader, decode_number, encode_header, encode_number
from rocmforge.shared.streams import ChunkStream


def test_field_encoding_out_of_octal_range():
    assert encode_number(0o7777777, 8) == b"7777777\x00"
    big = encode_number(1 << 40, 12)
    assert big[0] == 0x80 and decode_number(big) == 1 << 40
    neg = encode_number(-5, 12)
    assert decode_number(neg) == -5
    e = TarEntry(name=b"big", type=REG, uid=3_000_000, mtime=-1, size=0)
    data = encode_header(e) + bytes(1024)
    (got,) = list(TarReader(ChunkStream(io.BytesIO(data))))
    assert (got.uid, got.mtime) == (3_000_000, -1)
