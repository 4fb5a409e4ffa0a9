"""Forward-only byte streams: `docker save` arrives as the SDK's generator of chunks, and an
image can be larger than memory or disk allows twice, so everything reads it once, front to back.

Every stream here has `read(n)` (up to n bytes, fewer only at the end) and `pieces(n)` (exactly n
bytes, as views of the chunks, so that layer data is copied once, into its output file).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO, Protocol

from rocmforge.shared.errors import ImageArchiveError

CHUNK_SIZE = 1 << 20


class Stream(Protocol):
    """Any stream here, or one that wraps one: read(n) and pieces(n) as described above."""

    def read(self, n: int) -> bytes: ...

    def pieces(self, n: int) -> Iterator[memoryview]: ...


class ChunkStream:
    """Bytes over an iterable of chunks (the SDK's response generator) or a file."""

    def __init__(self, source: Iterable[bytes] | BinaryIO):
        if hasattr(source, "read"):
            f = source
            source = iter(lambda: f.read(CHUNK_SIZE), b"")
        self._chunks = iter(source)
        self._buf = memoryview(b"")
        self._pos = 0

    def _next_chunk(self) -> bool:
        for chunk in self._chunks:
            if chunk:
                self._buf, self._pos = memoryview(chunk), 0
                return True
        return False

    def read(self, n: int) -> bytes:
        parts = []
        while n > 0:
            if self._pos >= len(self._buf) and not self._next_chunk():
                break
            take = min(n, len(self._buf) - self._pos)
            parts.append(self._buf[self._pos : self._pos + take])
            self._pos += take
            n -= take
        return b"".join(parts)

    def pieces(self, n: int) -> Iterator[memoryview]:
        while n > 0:
            if self._pos >= len(self._buf) and not self._next_chunk():
                raise ImageArchiveError("image archive ends early")
            take = min(n, len(self._buf) - self._pos)
            yield self._buf[self._pos : self._pos + take]
            self._pos += take
            n -= take


class HashingWindow:
    """The next `size` bytes of a stream (one layer tar), hashed as they pass: the hash is the
    layer's diff ID, checked against what the image config claims. size None: the rest of the
    stream, for a layer decompressed from its blob, whose length is known only at its end."""

    def __init__(self, src: Stream, size: int | None):
        self.src, self.size, self.remaining, self.hash = src, size, size, hashlib.sha256()
        self.passed = 0

    def _count(self, data: bytes | memoryview) -> None:
        self.passed += len(data)
        if self.remaining is not None:
            self.remaining -= len(data)
        self.hash.update(data)

    def read(self, n: int) -> bytes:
        data = self.src.read(n if self.remaining is None else min(n, self.remaining))
        self._count(data)
        return data

    def pieces(self, n: int) -> Iterator[memoryview]:
        if self.remaining is not None and n > self.remaining:
            raise ImageArchiveError("a tar member runs past the end of its layer")
        for p in self.src.pieces(n):
            self._count(p)
            yield p

    def drain(self) -> None:
        if self.remaining is not None:
            for _ in self.pieces(self.remaining):
                pass
        else:
            while self.read(CHUNK_SIZE):
                pass

    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


class PrefixedStream:
    """A stream that first gives back bytes already read from it (a peeked header block)."""

    def __init__(self, head: bytes, src: Stream):
        self.head, self.src = head, src

    def read(self, n: int) -> bytes:
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            return out + (self.src.read(n - len(out)) if n > len(out) else b"")
        return self.src.read(n)

    def pieces(self, n: int) -> Iterator[memoryview]:
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            n -= len(out)
            yield memoryview(out)
        yield from self.src.pieces(n)
