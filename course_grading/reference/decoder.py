"""07_decoder: DecoderLayer, Decoder, the encoder-decoder Transformer and padding masks.

Attribute names (the graders and the training code load state_dicts by these names):

    DecoderLayer self_attn, cross_attn (MultiHeadAttention), ffn (FeedForward),
                 norm1, norm2, norm3 (LayerNorm), dropout
    Decoder      embedding (nn.Embedding), pos_encoding (PositionalEncoding), layers (ModuleList)
    Transformer  encoder (Encoder), decoder (Decoder), generator (nn.Linear d_model -> tgt_vocab)

so a Transformer's state_dict has keys such as ``encoder.embedding.weight``,
``encoder.layers.0.self_attn.q_proj.weight``, ``decoder.layers.1.cross_attn.k_proj.bias``,
``decoder.layers.0.norm3.weight``, ``generator.weight``. The positional tables are
non-persistent buffers: they are rebuilt on construction and are not in the state_dict.

``Decoder`` is 06's ``Encoder`` with other layers (its ``layer_class``): the same embedding,
positions and stack, its own ``forward``. ``DecoderLayer`` has the shape of ``EncoderLayer``
with a cross-attention sublayer added, and reads whole, as the notebook teaches it: each is
copied verbatim into the students' ``building_blocks.py`` (``course_grading.authoring.building_blocks``).
"""

from __future__ import annotations

import torch
from torch import nn

from .encoder import Encoder, FeedForward, LayerNorm, residual
from .multi_head import MultiHeadAttention


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder's memory, feed-forward.

    Cross-attention takes its queries from the decoder (x) and its keys and values from
    ``memory``. Post-norm by default, pre-norm with norm_first=True (as in EncoderLayer).
    """

    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        # x (b, t, d_model), memory (b, s, d_model)
        def attend(h):
            return self.self_attn(h, h, h, tgt_mask)[0]  # (b, t, d_model)

        def attend_memory(h):
            return self.cross_attn(h, memory, memory, memory_mask)[0]  # (b, t, d_model)

        x = residual(x, self.norm1, attend, self.dropout, self.norm_first)  # (b, t, d_model)
        x = residual(x, self.norm2, attend_memory, self.dropout, self.norm_first)  # (b, t, d_model)
        return residual(x, self.norm3, self.ffn, self.dropout, self.norm_first)  # (b, t, d_model)


class Decoder(Encoder):
    """Target embedding × √d_model + sinusoidal positions, then ``num_layers`` decoder layers.

    The same embedding, positions and stack as ``Encoder`` (its ``__init__`` and ``embed``);
    only the layers, and what each is given, differ."""

    layer_class = DecoderLayer

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None):
        x = self.embed(tgt)  # (b, t, d_model)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)  # (b, t, d_model)
        return x


class Transformer(nn.Module):
    """The encoder-decoder of "Attention Is All You Need", returning logits over the target vocab.

    ``src_mask`` (e.g. ``make_padding_mask(src, pad_id)``) masks the encoder's self-attention
    and the decoder's cross-attention; ``tgt_mask`` (e.g. ``causal_mask(t)``, possibly combined
    with a target padding mask) masks the decoder's self-attention; None means no mask.
    Weight matrices start Xavier-uniform, as in the Annotated Transformer, so that the
    √d_model-scaled embeddings start on the same scale as the positional encodings.
    """

    def __init__(
        self,
        src_vocab_size,
        tgt_vocab_size,
        d_model=128,
        num_heads=4,
        d_ff=512,
        num_layers=2,
        max_len=512,
        dropout=0.0,
    ):
        super().__init__()
        self.encoder = Encoder(src_vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout)
        self.decoder = Decoder(tgt_vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask=None):
        return self.encoder(src, src_mask)  # (b, s, d_model)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        h = self.decoder(tgt, memory, tgt_mask, memory_mask)  # (b, t, d_model)
        return self.generator(h)  # (b, t, tgt_vocab_size)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encode(src, src_mask)  # (b, s, d_model)
        return self.decode(tgt, memory, tgt_mask, src_mask)  # (b, t, tgt_vocab_size)


def make_padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(b, s) token ids -> (b, 1, 1, s) bool, True where a real token may be attended to.

    The two singleton dims broadcast over heads and query positions.
    """
    return (ids != pad_id)[:, None, None, :]  # (b, 1, 1, s)


__all__ = [
    "DecoderLayer",
    "Decoder",
    "Transformer",
    "make_padding_mask",
    "Encoder",
    "FeedForward",
    "LayerNorm",
]
