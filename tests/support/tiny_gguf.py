"""A tiny llama-architecture model that llama.cpp loads, written by the test that serves it (nothing downloaded).

Through ``gguf`` (PyPI, published by llama.cpp): 2 layers, width 64, 4 heads, a context of 512, a SentencePiece
("llama") vocabulary of 3 specials, 256 byte tokens (byte fallback: any text tokenizes), 2 chat markers and ~100
pieces, random weights from ``seed``, a ChatML chat template; all F32, about 0.5 MB, written in well under a second.
Its text is noise; what the tests read is the engine's behaviour and metrics. The metadata keys are the ones
llama.cpp's loader requires for the llama architecture (llama.cpp src/llama-model.cpp, ``LLM_ARCH_LLAMA``).
"""

from __future__ import annotations

import string
from pathlib import Path

import gguf
import numpy as np

LAYERS, WIDTH, HEADS, FEED_FORWARD, CONTEXT = 2, 64, 4, 128, 512
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
WORDS = ("hello", "world", "the", "a", "is", "of", "and", "to", "in", "test", "fleet", "pilot", "model", "user")


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, their scores (SentencePiece merges prefer higher: longer pieces score more) and their types."""
    kind = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "<|im_start|>", "<|im_end|>"]
    types = [kind.UNKNOWN, kind.CONTROL, kind.CONTROL, *([kind.BYTE] * 256), kind.CONTROL, kind.CONTROL]
    pieces = ["\u2581", *string.ascii_lowercase, *("\u2581" + c for c in string.ascii_lowercase)]
    pieces += [*("\u2581" + w for w in WORDS), *string.digits, *".,!?:;'-"]
    for piece in dict.fromkeys(pieces):
        tokens.append(piece)
        types.append(kind.NORMAL)
    scores = [float(len(t)) if k == kind.NORMAL else 0.0 for t, k in zip(tokens, types, strict=True)]
    return tokens, scores, [int(k) for k in types]


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    tokens, scores, types = vocabulary()
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones((n,), dtype=np.float32)

    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("fleetpilot-tiny-test")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)
    # numpy's shape is GGUF's ``ne`` reversed: ne {width, vocab} is (vocab, width)
    writer.add_tensor("token_embd.weight", weights(len(tokens), WIDTH))
    writer.add_tensor("output_norm.weight", ones(WIDTH))
    writer.add_tensor("output.weight", weights(len(tokens), WIDTH))
    for layer in range(LAYERS):
        block = f"blk.{layer}."
        writer.add_tensor(block + "attn_norm.weight", ones(WIDTH))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}{name}.weight", weights(WIDTH, WIDTH))
        writer.add_tensor(block + "ffn_norm.weight", ones(WIDTH))
        writer.add_tensor(block + "ffn_gate.weight", weights(FEED_FORWARD, WIDTH))
        writer.add_tensor(block + "ffn_up.weight", weights(FEED_FORWARD, WIDTH))
        writer.add_tensor(block + "ffn_down.weight", weights(WIDTH, FEED_FORWARD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
