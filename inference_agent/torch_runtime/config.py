"""The small decoder-only transformer's shape, and where its weights come from (a seed, or a local file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inference_agent.torch_runtime.tokenizer import VOCAB_SIZE


@dataclass(frozen=True)
class ModelConfig:
    """Defaults give ~4.3 M parameters: 4 layers × (4·256² attention + 2·256·1024 MLP) ≈ 3.1 M, plus 1.2 M of
    embeddings and output head (258 tokens twice, 4,096 positions, × 256)."""

    vocab_size: int = VOCAB_SIZE
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    max_context: int = 4096  # prompt + generated tokens of one sequence
    seed: int = 0  # deterministic random weights when no weights_path is given
    weights_path: Path | None = None  # a torch state_dict saved with torch.save; nothing is downloaded
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if self.vocab_size < VOCAB_SIZE:
            raise ValueError(f"vocab_size {self.vocab_size} is below the tokenizer's {VOCAB_SIZE}")
        if self.dtype not in {"float32", "float64", "float16", "bfloat16"}:
            raise ValueError(f"dtype {self.dtype!r} is not one of float32, float64, float16, bfloat16")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token: 4 layers × 2 × 256 × 4 bytes = 8 KiB at the defaults."""
        itemsize = 8 if self.dtype == "float64" else 4 if self.dtype == "float32" else 2
        return self.n_layers * 2 * self.d_model * itemsize


TINY_MODEL = ModelConfig(d_model=64, n_layers=2, n_heads=4, d_ff=128, max_context=512)
"""A model for tests: builds in milliseconds, same code paths."""
