"""The byte-level tokenizer: round trips, special ids, and characters split across tokens."""

from __future__ import annotations

from inference_agent.torch_runtime.tokenizer import BOS_ID, EOS_ID, StreamDecoder, count_prompt_tokens, decode, encode


def test_round_trip_with_bos_and_specials_dropped() -> None:
    assert encode("hé") == [BOS_ID, 104, 195, 169]
    assert decode([*encode("hé ✓"), EOS_ID]) == "hé ✓"
    assert count_prompt_tokens("hé") == 4 and encode("") == [BOS_ID]


def test_broken_utf8_is_replaced_not_raised() -> None:
    assert decode([195]) == "\ufffd"


def test_stream_decoder_waits_for_whole_characters() -> None:
    decoder = StreamDecoder()
    assert [decoder.push(i) for i in (104, 195, 169, EOS_ID)] == ["h", "", "é", ""]
    decoder.push(195)
    assert decoder.flush() == "\ufffd"
