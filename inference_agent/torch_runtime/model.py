"""The small decoder-only transformer, with three attention paths over the same weights: dense (the reference,
no cache), prefill (a batch of prompts, K/V written into the paged cache) and decode (one token per sequence, K/V
gathered from the paged cache by block table, sequences of different lengths masked)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional

from inference_agent.torch_runtime.blocks import BlockRef
from inference_agent.torch_runtime.config import ModelConfig
from inference_agent.torch_runtime.kv_cache import PagedKVCache

# (layer, q, k, v) → attention output [B, H, T, D]; each path supplies its own
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def pick_device(override: str | None = None) -> torch.device:
    """``override`` if given, else "cuda" when a GPU is present, else "cpu"."""
    return torch.device(override or ("cuda" if torch.cuda.is_available() else "cpu"))


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


class DecoderBlock(nn.Module):
    """Pre-norm attention and MLP; attention itself is delegated so the cache paths share these weights."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.ln1 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor, layer: int, attend: Attend) -> torch.Tensor:
        batch, length, width = x.shape
        qkv = self.qkv(self.ln1(x)).view(batch, length, 3, self.n_heads, width // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [B, H, T, D]
        attended = attend(layer, q, k, v).transpose(1, 2).reshape(batch, length, width)
        x = x + self.out(attended)
        mlp: torch.Tensor = self.fc2(functional.gelu(self.fc1(self.ln2(x))))
        return x + mlp


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_context, config.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def _run(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, attend)
        hidden: torch.Tensor = self.ln_f(x)
        return hidden

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(hidden)
        return logits

    def forward_dense(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] of whole sequences [B, T], recomputed from scratch: the reference without a cache."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok_emb(ids) + self.pos_emb(positions)
        hidden = self._run(x, lambda _layer, q, k, v: functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self._logits(hidden)

    def prefill(
        self, prompts: Sequence[Sequence[int]], tables: Sequence[Sequence[BlockRef]], cache: PagedKVCache
    ) -> torch.Tensor:
        """Run a batch of prompts (padded to the longest), write their K/V into their blocks, and answer the logits
        [B, V] of each prompt's last token."""
        device = cache.compute_device
        lengths = torch.tensor([len(p) for p in prompts], device=device)
        width = int(lengths.max())
        ids = torch.tensor([[*p, *[0] * (width - len(p))] for p in prompts], device=device)
        valid = torch.arange(width, device=device)[None, :] < lengths[:, None]  # [B, T]
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        mask = (causal[None] & valid[:, None, :])[:, None]  # [B, 1, T, T]: causal and not padding
        slots = [
            (table[t // cache.block_size], t % cache.block_size)
            for p, table in zip(prompts, tables, strict=True)
            for t in range(len(p))
        ]
        index = cache.slot_index([s[0] for s in slots], [s[1] for s in slots])

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.write(layer, index, k.transpose(1, 2)[valid], v.transpose(1, 2)[valid])
            return functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        x = self.tok_emb(ids) + self.pos_emb(torch.arange(width, device=device))
        hidden = self._run(x, attend)
        return self._logits(hidden[torch.arange(len(prompts), device=device), lengths - 1])

    def decode(
        self, tokens: Sequence[int], positions: Sequence[int], tables: Sequence[Sequence[BlockRef]], cache: PagedKVCache
    ) -> torch.Tensor:
        """One step for a batch: token ``tokens[b]`` at ``positions[b]``, attending to the sequence's cached K/V;
        answers logits [B, V]."""
        device, size = cache.compute_device, cache.block_size
        pos = torch.tensor(positions, device=device)
        slot_index = cache.slot_index(
            [t[p // size] for t, p in zip(tables, positions, strict=True)], [p % size for p in positions]
        )
        table_index = cache.table_index(tables)
        span = torch.arange(table_index.num_blocks * size, device=device)
        mask = (span[None, :] <= pos[:, None])[:, None, None, :]  # [B, 1, 1, S]: this token and the ones before

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.write(layer, slot_index, k[:, :, 0], v[:, :, 0])
            keys, values = cache.gather(layer, table_index)
            return functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask)

        x = self.tok_emb(torch.tensor(tokens, device=device))[:, None] + self.pos_emb(pos)[:, None]
        return self._logits(self._run(x, attend)[:, 0])


def build_model(config: ModelConfig, device: torch.device) -> Transformer:
    """Weights from ``config.weights_path`` (a local state_dict) or deterministic random ones from ``config.seed``."""
    model = Transformer(config)
    if config.weights_path is not None:
        state = torch.load(config.weights_path, map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
    else:
        _init_random(model, config.seed)
    return model.to(device=device, dtype=torch_dtype(config.dtype)).eval()


def _init_random(model: Transformer, seed: int) -> None:
    """N(0, 1/fan_in) weights keep activations near unit scale; embeddings and the output head N(0, 1) spread the
    logits (std ≈ √256 = 16 at d_model 256), so greedy choices are far from ties and stable across devices."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif "ln" in name:
                param.fill_(1.0)
            elif "emb" in name or name.startswith("head"):
                param.normal_(0.0, 1.0, generator=generator)
            else:
                param.normal_(0.0, 1.0 / math.sqrt(param.shape[1]), generator=generator)
