"""Building blocks for 08_generation: the course's own versions of components that earlier
notebooks had you build (causal_mask from 03_attention, make_padding_mask from 07_decoder,
Transformer from 07_decoder), so that this notebook works whatever state your earlier work is
in.

Provided with the assignment by `course release`. Grading always uses the instructor's copy of
this file, so editing it changes nothing in your grade.
"""
import math

import torch
from torch import nn


def causal_mask(size: int, device=None) -> torch.Tensor:
    """(size, size) bool, True on and below the diagonal: position i may attend to j <= i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def make_padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(b, s) token ids -> (b, 1, 1, s) bool, True where a real token may be attended to.

    The two singleton dims broadcast over heads and query positions.
    """
    return (ids != pad_id)[:, None, None, :]  # (b, 1, 1, s)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(b, s, d_model) -> (b, num_heads, s, d_head).

    Head h gets features h*d_head ... (h+1)*d_head - 1 of every token.
    """
    b, s, d_model = x.shape
    x = x.view(b, s, num_heads, d_model // num_heads)  # (b, s, h, d_head): cut the features
    return x.transpose(1, 2)  # (b, h, s, d_head): each head sees the whole sequence


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(b, h, s, d_head) -> (b, s, h * d_head), the inverse of split_heads."""
    b, h, s, d_head = x.shape
    x = x.transpose(1, 2).contiguous()  # (b, s, h, d_head)
    return x.view(b, s, h * d_head)  # (b, s, d_model): the heads side by side


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x_i - max x) / sum_j exp(x_j - max x): subtracting the max keeps exp from overflowing."""
    x = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q Kᵀ / √d_k) V.

    Q (..., q, d_k), K (..., k, d_k), V (..., k, d_v); mask bool, broadcastable to (..., q, k),
    True = may attend. Returns output (..., q, d_v) and weights (..., q, k).
    """
    d_k = Q.size(-1)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (..., q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., q, k)
    return weights @ V, weights  # (..., q, d_v), (..., q, k)


class MultiHeadAttention(nn.Module):
    """Concat(head_1, ..., head_h) W_O with head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).

    forward(query (b, q, d_model), key (b, k, d_model), value (b, k, d_model), mask=None)
    returns output (b, q, d_model) and the per-head weights (b, h, q, k), before dropout.
    ``mask``: bool, True = may attend, broadcastable to (b, h, q, k), e.g. (q, k) for a causal
    mask or (b, 1, 1, k) for padding. Dropout (training only) drops attention weights.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                "every head needs the same size d_model // num_heads"
            )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # all heads' W_Q side by side
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O, called o_proj in Llama
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        Q = split_heads(self.q_proj(query), self.num_heads)  # (b, h, q, d_head)
        K = split_heads(self.k_proj(key), self.num_heads)  # (b, h, k, d_head)
        V = split_heads(self.v_proj(value), self.num_heads)  # (b, h, k, d_head)
        out, weights = scaled_dot_product_attention(Q, K, V, mask)  # (b,h,q,d_head), (b,h,q,k)
        if self.training and self.dropout.p > 0:
            out = self.dropout(weights) @ V  # drop attention links, as torch does
        return self.out_proj(merge_heads(out)), weights  # (b, q, d_model), (b, h, q, k)


class FeedForward(nn.Module):
    """linear2(dropout(relu(linear1(x)))), applied to each position on its own."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.linear1(x))  # (b, s, d_ff)
        return self.linear2(self.dropout(h))  # (b, s, d_model)


class LayerNorm(nn.Module):
    """y = weight * (x - mean) / sqrt(var + eps) + bias, over the last dim (biased variance)."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # γ, starts as "no scaling"
        self.bias = nn.Parameter(torch.zeros(d_model))  # β, starts as "no shift"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1), divides by d_model
        x_hat = (x - mean) / torch.sqrt(var + self.eps)  # (..., d_model)
        return self.weight * x_hat + self.bias  # (..., d_model)


def residual(x: torch.Tensor, norm, sublayer, dropout, norm_first: bool) -> torch.Tensor:
    """One sublayer of a Transformer layer with its residual connection and LayerNorm ``norm``:
    post-norm (the 2017 paper) norm(x + dropout(sublayer(x))); pre-norm (norm_first=True, GPT-2
    and later) x + dropout(sublayer(norm(x)))."""
    if norm_first:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a residual connection and a LayerNorm.

    norm_first=False (post-norm, the 2017 paper): x = norm1(x + attn(x)); x = norm2(x + ffn(x)).
    norm_first=True  (pre-norm, GPT-2 and later): x = x + attn(norm1(x)); x = x + ffn(norm2(x)).
    """

    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        def attend(h):
            return self.self_attn(h, h, h, mask)[0]  # (b, s, d_model)

        x = residual(x, self.norm1, attend, self.dropout, self.norm_first)  # (b, s, d_model)
        return residual(x, self.norm2, self.ffn, self.dropout, self.norm_first)  # (b, s, d_model)


def sinusoidal_positional_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(max_len, d_model): PE[pos, 2i] = sin(pos / base^(2i/d_model)), PE[pos, 2i+1] = cos(same).

    Positions start at 0. Computed in float64, returned in torch's default dtype (float32).
    ``base`` is 10000 in the paper (and in the contract); it is a keyword only for the demos.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),): 0, 2, 4, ...
    angle = pos / base ** (two_i / d_model)  # (max_len, ceil(d/2)), one frequency per pair
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)  # even columns
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # odd columns (one fewer when d is odd)
    return pe.to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    """x + PE[:seq], then dropout: x (b, seq, d_model) -> (b, seq, d_model)."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False
        )  # (max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[: x.size(1)])  # (b, seq, d_model)


class Encoder(nn.Module):
    """Token embedding × √d_model + sinusoidal positions, then ``num_layers`` post-norm layers.

    ``layer_class`` is the kind of layer it stacks (07's ``Decoder`` stacks ``DecoderLayer``)."""

    layer_class = EncoderLayer

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        num_layers: int,
        max_len: int = 512,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            [self.layer_class(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)]
        )

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(b, s) token ids -> (b, s, d_model): the scaled embeddings plus the positions."""
        x = self.embedding(ids) * math.sqrt(self.d_model)  # (b, s, d_model)
        return self.pos_encoding(x)  # (b, s, d_model)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed(src)  # (b, s, d_model)
        for layer in self.layers:
            x = layer(x, src_mask)  # (b, s, d_model)
        return x


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
