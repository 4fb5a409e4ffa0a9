"""Layer members of an image archive, known by their first bytes: a docker-archive holds layer
tars, an OCI image layout layer blobs that may be gzip- or zstd-compressed tars, named by the
digest of the compressed bytes. A compressed layer is decompressed as it streams past, in
chunks of bounded size, so that no layer is ever held whole in memory or written out compressed.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from rocmforge.assemble.image.tarcodec import BLOCK, looks_like_tar_header
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.streams import CHUNK_SIZE, ChunkStream, HashingWindow, PrefixedStream, Stream

GZIP_MAGIC = b"\x1f\x8b\x08"  # the magic, then deflate, gzip's only method
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
HEAD_SIZE = BLOCK  # what is read of a member to tell what it is

# zstandard's decompressobj takes no output limit, and a zstd block of one repeated byte turns
# 4 input bytes into 128 KiB: fed this much at a time, one call gives at most some 32 MiB.
ZSTANDARD_FEED = 1024

ZSTD_MISSING = (
    "needs a zstd decoder, and this Python has none: install the python package "
    "zstandard (pip install zstandard), or run on Python 3.14 or later (compression.zstd)"
)


class Decoder(Protocol):
    """One compressed stream being decompressed; eof once its end has been read."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...


class LimitedDecoder(Decoder, Protocol):
    """A decoder that takes an output limit (zlib's, the standard library's zstd, lzma, bz2)."""

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


class ZlibDecoder(LimitedDecoder, Protocol):
    @property
    def unconsumed_tail(self) -> bytes: ...


class BufferingDecoder(LimitedDecoder, Protocol):
    @property
    def needs_input(self) -> bool: ...


class ZstandardDecoder(Decoder, Protocol):
    def decompress(self, data: memoryview, /) -> bytes: ...


D = TypeVar("D", bound=Decoder)


@dataclass(frozen=True)
class Codec(Generic[D]):
    name: str
    new_decoder: Callable[[], D]
    # Decompresses data with decoder, yielding output in bounded chunks; returns the input left
    # after the end of the decoder's stream (the next gzip member or zstd frame), else b"".
    feed: Callable[[D, bytes], Generator[bytes, None, bytes]]
    errors: tuple[type[BaseException], ...]


def feed_zlib(decoder: ZlibDecoder, data: bytes) -> Generator[bytes, None, bytes]:
    """zlib keeps input beyond max_length in unconsumed_tail, and output beyond it (a long match)
    inside, so a full chunk means asking again even when no input is left."""
    while True:
        out = decoder.decompress(data, CHUNK_SIZE)
        if out:
            yield out
        data = decoder.unconsumed_tail
        if decoder.eof:
            return decoder.unused_data
        if not data and len(out) < CHUNK_SIZE:
            return b""


def feed_buffering(decoder: BufferingDecoder, data: bytes) -> Generator[bytes, None, bytes]:
    """compression.zstd (like lzma and bz2) keeps input beyond max_length inside and says by
    needs_input when it has given all it can."""
    while True:
        out = decoder.decompress(data, CHUNK_SIZE)
        if out:
            yield out
        data = b""
        if decoder.eof:
            return decoder.unused_data
        if decoder.needs_input:
            return b""


def feed_zstandard(decoder: ZstandardDecoder, data: bytes) -> Generator[bytes, None, bytes]:
    """zstandard's decompressobj takes no output limit, so the input goes in ZSTANDARD_FEED bytes at
    a time."""
    view = memoryview(data)
    for start in range(0, len(view), ZSTANDARD_FEED):
        out = decoder.decompress(view[start : start + ZSTANDARD_FEED])
        if out:
            yield out
        if decoder.eof:
            return decoder.unused_data + bytes(view[start + ZSTANDARD_FEED :])
    return b""


GZIP = Codec("gzip", lambda: zlib.decompressobj(wbits=31), feed_zlib, (zlib.error,))


def zstd_codec() -> Codec[Any] | None:
    """The zstd decoder this Python has: the standard library's from 3.14, else zstandard's."""
    if sys.version_info >= (3, 14):  # the standard library's zstd exists from Python 3.14
        try:
            from compression import zstd  # optional: a Python may be built without it

            return Codec("zstd", zstd.ZstdDecompressor, feed_buffering, (zstd.ZstdError,))
        except ImportError:
            pass
    try:
        import zstandard  # optional: only a zstd layer needs it
    except ImportError:
        return None
    return Codec("zstd", lambda: zstandard.ZstdDecompressor().decompressobj(), feed_zstandard, (zstandard.ZstdError,))


def decoded_chunks(compressed: Iterator[bytes], codec: Codec[D], blob: str) -> Iterator[bytes]:
    """The decompressed bytes of a blob. Concatenated gzip members or zstd frames are one stream,
    as Go's readers (Docker's) take them."""
    decoder: D | None = None
    try:
        for data in compressed:
            while data:
                if decoder is None or decoder.eof:
                    decoder = codec.new_decoder()
                data = yield from codec.feed(decoder, data)
    except codec.errors as exc:
        raise ImageArchiveError(f"layer {blob} is not valid {codec.name} ({exc})") from None
    if decoder is None or not decoder.eof:
        raise ImageArchiveError(f"layer {blob}: its {codec.name} stream ends early (a truncated blob)")


def codec_of(head: bytes, blob: str) -> Codec[Any] | None:
    """The compression a member's first bytes show, or None for none."""
    if head.startswith(GZIP_MAGIC):
        return GZIP
    if head.startswith(ZSTD_MAGIC):
        codec = zstd_codec()
        if codec is None:
            raise ImageArchiveError(f"layer {blob} is zstd-compressed, which {ZSTD_MISSING}")
        return codec
    return None


def layer_window(name: str, member: Stream, size: int) -> tuple[bytes, HashingWindow | None]:
    """(the bytes read of the member, the layer tar in it), or (its first bytes, None) when the
    member is not a layer. The window hashes the uncompressed tar, whose digest is the diff ID."""
    head = member.read(min(HEAD_SIZE, size))
    codec = codec_of(head, name)
    if codec is not None:
        compressed = PrefixedStream(head, member)
        chunks = iter(lambda: compressed.read(CHUNK_SIZE), b"")
        return head, HashingWindow(ChunkStream(decoded_chunks(chunks, codec, name)), None)
    if size >= 2 * BLOCK and (name.endswith("layer.tar") or looks_like_tar_header(head)):
        return head, HashingWindow(PrefixedStream(head, member), size)
    return head, None
