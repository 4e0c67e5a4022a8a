"""Byte-level tokenizer: the 256 byte values are token ids 0..255, then the special ids (BOS, EOS).

No vocabulary file and no merges: any text round-trips, and the model's vocabulary is 256 + the specials.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

BYTE_VOCAB = 256
BOS_ID = 256  # prepended to every prompt, so an empty prompt is still one token
EOS_ID = 257  # the model's end-of-text token
VOCAB_SIZE = 258


def encode(text: str, *, add_bos: bool = True) -> list[int]:
    """UTF-8 bytes of ``text`` as ids, with BOS first: "hé" → [256, 104, 195, 169]."""
    ids = list(text.encode("utf-8"))
    return [BOS_ID, *ids] if add_bos else ids


def decode(ids: Iterable[int]) -> str:
    """Bytes back to text; special ids are dropped and broken UTF-8 becomes U+FFFD."""
    return bytes(i for i in ids if 0 <= i < BYTE_VOCAB).decode("utf-8", errors="replace")


def count_prompt_tokens(text: str) -> int:
    """The prompt's length in tokens as the engine counts it (``usage.prompt_tokens``): its bytes plus BOS."""
    return len(text.encode("utf-8")) + 1


class StreamDecoder:
    """Turns one request's tokens into text piece by piece: a character split over two tokens comes out whole.

    "é" is bytes 0xC3 0xA9: the first token yields "", the second "é".
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """The text this token completes ("" for a special id or an unfinished character)."""
        if not 0 <= token_id < BYTE_VOCAB:
            return ""
        return self._decoder.decode(bytes([token_id]))

    def flush(self) -> str:
        """Whatever is left at the end of the request (a cut-off character becomes U+FFFD)."""
        return self._decoder.decode(b"", final=True)
