"""Chat completion bodies: messages rendered into one prompt, the token-limit names, each bad part named."""

from __future__ import annotations

from typing import Any

import pytest

from inference_agent.serving.frontend.schema import (
    MAX_PROMPT_BYTES,
    BadRequest,
    ChatMessage,
    parse_chat,
    render_chat,
)

HI = [{"role": "user", "content": "Hi"}]


def test_messages_render_one_per_line_ending_with_the_assistant_turn() -> None:
    body = parse_chat({"model": "m", "messages": [{"role": "system", "content": "Be brief"}, *HI]})
    assert body.prompt == "system: Be brief\nuser: Hi\nassistant:"
    assert body.content_bytes == len("Be brief") + len("Hi")
    assert (body.max_tokens, body.stream) == (16, False)


def test_text_parts_join_and_a_tool_calling_assistant_turn_has_no_content() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    body = parse_chat({"model": "m", "messages": [parts, {"role": "assistant", "content": None}]})
    assert body.messages == (ChatMessage("user", "ab"), ChatMessage("assistant", ""))


@pytest.mark.parametrize(
    ("limits", "max_tokens"),
    [
        ({"max_tokens": 5}, 5),
        ({"max_completion_tokens": 7}, 7),
        ({"max_tokens": 5, "max_completion_tokens": 7}, 7),  # OpenAI's current name wins
        ({"max_tokens": None}, 16),
    ],
)
def test_max_completion_tokens_or_max_tokens(limits: dict[str, Any], max_tokens: int) -> None:
    assert parse_chat({"model": "m", "messages": HI, **limits}).max_tokens == max_tokens


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": ["hi"]}, "messages.0"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "messages": [*HI, {"role": "user", "content": 3}]}, "messages.1.content"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages.0.content"),
        ({"model": "m", "messages": [{"role": "user", "content": "x" * MAX_PROMPT_BYTES}]}, "messages"),
        ({"model": "m", "messages": HI, "max_completion_tokens": 0}, "max_completion_tokens"),
        ({"model": "m", "messages": HI, "max_tokens": True}, "max_tokens"),
        ({"model": "m", "messages": HI, "stream": "yes"}, "stream"),
        ({"messages": HI}, "model"),
    ],
)
def test_a_bad_chat_body_names_its_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_chat(body)
    assert refused.value.field == field


def test_render_of_no_messages_is_the_assistant_turn_alone() -> None:
    assert render_chat(()) == "assistant:"
