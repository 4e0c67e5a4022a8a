"""Request bodies read with a size limit, before and after gzip, so neither a huge body nor a gzip bomb gets far."""

from __future__ import annotations

import zlib

from fastapi import HTTPException, Request, status

from collector.errors import BatchTooLarge

GZIP_WBITS = 16 + zlib.MAX_WBITS


async def read_body(request: Request, *, max_bytes: int) -> bytes:
    """The body, at most ``max_bytes`` as sent and as inflated (``Content-Encoding: gzip`` or none)."""
    body = await read_raw_body(request, max_bytes=max_bytes)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, f"Content-Encoding {encoding!r}: use gzip or none")
    return _gunzip(body, max_bytes=max_bytes)


async def read_raw_body(request: Request, *, max_bytes: int) -> bytes:
    """The body as sent (still encoded), at most ``max_bytes``: refused by its Content-Length before it is read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BatchTooLarge(f"body of {declared} bytes is over the limit of {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BatchTooLarge(f"body is over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _gunzip(body: bytes, *, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj(GZIP_WBITS)
    try:
        data = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"body is not valid gzip: {exc}") from None
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise BatchTooLarge(f"body inflates past the limit of {max_bytes} bytes")
    if not inflater.eof:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "body is truncated gzip")
    return data
