"""Variants for 07_decoder: BUGGY must fail their grade cell, CORRECT must pass it.

Each source runs after the notebook's setup and solution cells, replacing one class/function.
"""

_DL = """
class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
{body}
"""


def _dl(body: str) -> str:
    return _DL.format(body=body)


PRE = """\
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, tgt_mask)[0]
            x = x + self.cross_attn(self.norm2(x), memory, memory, memory_mask)[0]
            return x + self.ffn(self.norm3(x))
"""
POST = """\
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.norm3(x + self.ffn(x))"""

_DEC = """
class Decoder(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512, dropout=0.0):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.layers = nn.ModuleList([DecoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None):
{body}
"""


def _dec(body: str) -> str:
    return _DEC.format(body=body)


_TR = """
class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=128, num_heads=4, d_ff=512,
                 num_layers=2, max_len=512, dropout=0.0):
        super().__init__()
        self.encoder = Encoder(src_vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout)
        self.decoder = Decoder(tgt_vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout)
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def encode(self, src, src_mask=None):
        return self.encoder(src, src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return self.generator(self.decoder(tgt, memory, tgt_mask, memory_mask))

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
{body}
"""


def _tr(body: str) -> str:
    return _TR.format(body=body)


# harvardnlp/annotated-transformer, the_annotated_transformer.py, PositionalEncoding: its table
# built once in float32 (argument order kept)
ANNOTATED_PE = """
from building_blocks import EncoderLayer


class AnnotatedPositionalEncoding(nn.Module):
    "Implement the PE function."

    def __init__(self, d_model, dropout, max_len=5000):
        super(AnnotatedPositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model)
        )
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)
"""

BUGGY = {
    "test_decoder_layer": {
        "cross_attention_detached": _dl(
            PRE
            + """\
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, memory_mask)[0].detach())
        return self.norm3(x + self.ffn(x))"""
        ),
        # full marks on the CPU, a crash on a GPU: a causal mask of its own, made on the CPU
        "own_causal_mask_made_on_the_cpu": _dl(
            """\
        if tgt_mask is not None:
            t = x.shape[1]
            tgt_mask = tgt_mask & torch.ones(t, t, dtype=torch.bool).tril()
"""
            + PRE
            + POST
        ),
        "pre_norm_normalises_memory": _dl(
            PRE.replace(
                "self.norm2(x), memory, memory", "self.norm2(x), self.norm2(memory), self.norm2(memory)"
            )
            + POST
        ),
        "cross_kv_from_decoder": _dl(
            PRE
            + """\
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, x, x)[0])
        return self.norm3(x + self.ffn(x))"""
        ),
        "cross_kv_from_decoder_with_mask": _dl(
            PRE
            + """\
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, x, x, memory_mask)[0])
        return self.norm3(x + self.ffn(x))"""
        ),
        "queries_from_memory": _dl(
            PRE
            + """\
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(memory, x, x)[0])
        return self.norm3(x + self.ffn(x))"""
        ),
        "tgt_mask_ignored": _dl(
            """\
        tgt_mask = None
"""
            + PRE
            + POST
        ),
        "memory_mask_ignored": _dl(
            """\
        memory_mask = None
"""
            + PRE
            + POST
        ),
        "always_pre_norm": _dl(PRE.replace("if self.norm_first:", "if True:") + POST),
        "always_post_norm": _dl(POST),
        "no_cross_residual": _dl(
            PRE
            + """\
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.norm3(x + self.ffn(x))"""
        ),
        "cross_before_self": _dl(
            PRE
            + """\
        x = self.norm1(x + self.cross_attn(x, memory, memory, memory_mask)[0])
        x = self.norm2(x + self.self_attn(x, x, x, tgt_mask)[0])
        return self.norm3(x + self.ffn(x))"""
        ),
        "shared_attention": _dl(PRE + POST).replace(
            "self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)",
            "self.cross_attn = self.self_attn",
        ),
        "uses_torch_sdpa": _dl(
            PRE
            + """\
        b, t, d = x.shape
        a = self.self_attn
        h = a.num_heads if hasattr(a, "num_heads") else 4
        q, k, v = (p(x).view(b, t, h, d // h).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj))
        o = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=tgt_mask)
        x = self.norm1(x + a.out_proj(o.transpose(1, 2).reshape(b, t, d)))
        x = self.norm2(x + self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.norm3(x + self.ffn(x))"""
        ),
    },
    "test_decoder": {
        "layers_under_no_grad": _dec("""\
        x = self.pos_encoding(self.embedding(tgt) * math.sqrt(self.d_model))
        with torch.no_grad():
            for layer in self.layers:
                x = layer(x, memory, tgt_mask, memory_mask)
        return x"""),
        "scale_as_a_cpu_tensor": _dec("""\
        x = self.pos_encoding(self.embedding(tgt) * torch.sqrt(torch.tensor([float(self.d_model)])))
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x"""),
        "no_sqrt_scale": _dec("""\
        x = self.pos_encoding(self.embedding(tgt))
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x"""),
        "no_positions": _dec("""\
        x = self.embedding(tgt) * math.sqrt(self.d_model)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x"""),
        "tgt_mask_not_passed": _dec("""\
        x = self.pos_encoding(self.embedding(tgt) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, memory, memory_mask=memory_mask)
        return x"""),
        "memory_mask_not_passed": _dec("""\
        x = self.pos_encoding(self.embedding(tgt) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, memory, tgt_mask)
        return x"""),
        "masks_swapped": _dec("""\
        x = self.pos_encoding(self.embedding(tgt) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, memory, memory_mask, tgt_mask)
        return x"""),
    },
    "test_make_padding_mask": {
        "mask_made_on_the_cpu_then_cleared": """
def make_padding_mask(ids, pad_id):
    mask = torch.ones(ids.shape, dtype=torch.bool)
    mask[ids == pad_id] = False
    return mask[:, None, None, :]
""",
        "polarity": """
def make_padding_mask(ids, pad_id):
    return (ids == pad_id)[:, None, None, :]
""",
        "flat_shape": """
def make_padding_mask(ids, pad_id):
    return ids != pad_id
""",
        "query_axis": """
def make_padding_mask(ids, pad_id):
    return (ids != pad_id)[:, None, :, None]
""",
        "float_mask": """
def make_padding_mask(ids, pad_id):
    return (ids != pad_id).float()[:, None, None, :]
""",
        "fixed_pad_zero": """
def make_padding_mask(ids, pad_id):
    return (ids != 0)[:, None, None, :]
""",
        "three_dims": """
def make_padding_mask(ids, pad_id):
    return (ids != pad_id).unsqueeze(1)
""",
    },
    "test_transformer": {
        # decode written like 08's greedy_decode: right logits, and nothing learns
        "decode_under_no_grad": _tr("""\
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)""").replace(
            "    def decode(", "    @torch.no_grad()\n    def decode("
        ),
        "default_masks_made_on_the_cpu": _tr("""\
        if src_mask is None:
            src_mask = torch.ones(src.shape[0], 1, 1, src.shape[1], dtype=torch.bool)
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)"""),
        "makes_its_own_causal_mask": _tr("""\
        tgt_mask = causal_mask(tgt.size(1), device=tgt.device)
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)"""),
        "src_mask_not_in_cross_attention": _tr("""\
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask)"""),
        "src_mask_not_in_encoder": _tr("""\
        return self.decode(tgt, self.encode(src), tgt_mask, src_mask)"""),
        "tgt_mask_ignored": _tr("""\
        return self.decode(tgt, self.encode(src, src_mask), None, src_mask)"""),
        "returns_probabilities": _tr("""\
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask).softmax(-1)"""),
        "generator_on_source_vocab": _tr("""\
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)""").replace(
            "nn.Linear(d_model, tgt_vocab_size)", "nn.Linear(d_model, src_vocab_size)"
        ),
        "decode_without_generator": _tr("""\
        return self.generator(self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask))""").replace(
            "return self.generator(self.decoder(tgt, memory, tgt_mask, memory_mask))",
            "return self.decoder(tgt, memory, tgt_mask, memory_mask)",
        ),
        "wrong_default_d_ff": _tr("""\
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)""").replace(
            "d_ff=512", "d_ff=2048"
        ),
        # the Annotated Transformer's Generator ends in log_softmax: log-probabilities, where
        # the contract asks for logits
        "generator_with_log_softmax": _tr("""\
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)""").replace(
            "return self.generator(self.decoder(tgt, memory, tgt_mask, memory_mask))",
            "return nn.functional.log_softmax(self.generator(self.decoder(tgt, memory, tgt_mask, "
            "memory_mask)), dim=-1)",
        ),
    },
}

CORRECT = {
    "test_decoder_layer": {
        "explicit_branches": _dl(PRE + POST),
        "with_dropout_and_warning": """
import warnings as _w
"""
        + _dl("""\
        _w.warn("just a warning")
        d = self.dropout
        if self.norm_first:
            h = self.norm1(x)
            x = x + d(self.self_attn(h, h, h, mask=tgt_mask)[0])
            h = self.norm2(x)
            x = x + d(self.cross_attn(query=h, key=memory, value=memory, mask=memory_mask)[0])
            return x + d(self.ffn(self.norm3(x)))
        sa, _ = self.self_attn(x, x, x, tgt_mask)
        x = self.norm1(x + d(sa))
        ca, _ = self.cross_attn(x, memory, memory, memory_mask)
        x = self.norm2(x + d(ca))
        return self.norm3(x + d(self.ffn(x)))"""),
        "torch_layer_norms": _dl(PRE + POST).replace(
            "LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)",
            "nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)",
        ),
        # pytorch/pytorch, torch/nn/modules/transformer.py, TransformerDecoderLayer.forward with
        # _sa_block, _mha_block and _ff_block (the course's attention and feed-forward inside)
        "pytorch_sa_mha_ff_blocks": """
class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask):
        x = self.self_attn(x, x, x, attn_mask)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask):
        x = self.cross_attn(x, mem, mem, attn_mask)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.ffn(x))
""",
        # d2l-ai/d2l-en, chapter_attention-mechanisms-and-transformers/transformer.md,
        # TransformerDecoderBlock with AddNorm (attention1, attention2 and addnorm1-3's norms
        # renamed, the arguments named as the contract names them, the masks passed as masks;
        # its key-value cache for prediction left out), and
        # the contract's pre-norm form beside it
        "d2l_add_norm": '''
class AddNorm(nn.Module):
    """The residual connection followed by layer normalization."""
    def __init__(self, ln, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = ln

    def forward(self, X, Y):
        return self.ln(self.dropout(Y) + X)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.addnorms = nn.ModuleList([AddNorm(self.norm1, dropout), AddNorm(self.norm2, dropout),
                                       AddNorm(self.norm3, dropout)])
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        X, enc_outputs = x, memory
        if self.norm_first:
            h = self.norm1(X)
            X = X + self.drop(self.self_attn(h, h, h, tgt_mask)[0])
            h = self.norm2(X)
            X = X + self.drop(self.cross_attn(h, enc_outputs, enc_outputs, memory_mask)[0])
            return X + self.drop(self.ffn(self.norm3(X)))
        # Self-attention
        X2 = self.self_attn(X, X, X, tgt_mask)[0]
        Y = self.addnorms[0](X, X2)
        # Encoder-decoder attention
        Y2 = self.cross_attn(Y, enc_outputs, enc_outputs, memory_mask)[0]
        Z = self.addnorms[1](Y, Y2)
        return self.addnorms[2](Z, self.ffn(Z))
''',
        # harvardnlp/annotated-transformer, the_annotated_transformer.py, DecoderLayer with
        # SublayerConnection (pre-norm), and the paper's post-norm form; norms named as asked
        "annotated_sublayer_connection": """
class DecoderLayer(nn.Module):
    "Decoder is made of self-attn, src-attn, and feed forward (defined below)"

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def sublayer(self, x, norm, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        "Follow Figure 1 (right) for connections."
        m = memory
        x = self.sublayer(x, self.norm1, lambda x: self.self_attn(x, x, x, tgt_mask)[0])
        x = self.sublayer(x, self.norm2, lambda x: self.cross_attn(x, m, m, memory_mask)[0])
        return self.sublayer(x, self.norm3, self.ffn)
""",
    },
    "test_decoder": {
        "explicit": _dec("""\
        e = self.embedding(tgt)
        x = self.pos_encoding(e * e.shape[-1] ** 0.5)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask)
        return x"""),
        # harvardnlp/annotated-transformer: Embeddings and its PositionalEncoding (a float32
        # table, cast by .double() with the module), the Decoder stack without the final
        # LayerNorm of its pre-norm layers
        "annotated_transformer_float32_table": ANNOTATED_PE
        + _dec("""\
        x = self.pos_encoding(self.embedding(tgt) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x""").replace(
            "self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)",
            "self.pos_encoding = AnnotatedPositionalEncoding(d_model, dropout, max_len)",
        ),
    },
    "test_make_padding_mask": {
        "ne_unsqueeze": """
def make_padding_mask(ids, pad_id):
    return ids.ne(pad_id).unsqueeze(1).unsqueeze(2)
""",
        "view": """
def make_padding_mask(ids, pad_id):
    b, s = ids.shape
    return (ids != pad_id).view(b, 1, 1, s)
""",
    },
    "test_transformer": {
        "no_xavier_init": _tr("""\
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, tgt_mask=tgt_mask, memory_mask=src_mask)"""),
        # harvardnlp/annotated-transformer, the_annotated_transformer.py: EncoderDecoder's
        # encode/decode/forward (argument order of the contract), Embeddings and
        # PositionalEncoding (float32 tables built once, cast by .double() with the model) in
        # the encoder and the decoder, a Generator without its log_softmax (the contract
        # returns logits)
        "annotated_transformer_float32_tables": ANNOTATED_PE
        + """
class Stack(nn.Module):
    def __init__(self, vocab, d_model, layers, dropout, max_len):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab, d_model)
        self.pos_encoding = AnnotatedPositionalEncoding(d_model, dropout, max_len)
        self.layers = layers

    def embed(self, x):
        return self.pos_encoding(self.embedding(x) * math.sqrt(self.d_model))


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=128, num_heads=4, d_ff=512,
                 num_layers=2, max_len=512, dropout=0.0):
        super().__init__()
        self.encoder = Stack(src_vocab_size, d_model, nn.ModuleList(
            [EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)]),
            dropout, max_len)
        self.decoder = Stack(tgt_vocab_size, d_model, nn.ModuleList(
            [DecoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)]),
            dropout, max_len)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        "Take in and process masked src and target sequences."
        return self.decode(tgt, self.encode(src, src_mask), tgt_mask, src_mask)

    def encode(self, src, src_mask=None):
        x = self.encoder.embed(src)
        for layer in self.encoder.layers:
            x = layer(x, src_mask)
        return x

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        x = self.decoder.embed(tgt)
        for layer in self.decoder.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.generator(x)
""",
        "reference_parts_and_prints": """
from course_grading.reference.decoder import Decoder as _RefDecoder
"""
        + _tr("""\
        print("forward", src.shape, tgt.shape)
        return self.generator(self.decoder(tgt, self.encoder(src, src_mask), tgt_mask, src_mask))""").replace(
            "self.decoder = Decoder(", "self.decoder = _RefDecoder("
        ),
    },
}


# Buggy variants whose outputs are right for every input on the CPU: the bug shows on another
# device, in the gradients or on a non-contiguous view, which the hidden checks try and the
# integrity audit (outputs on fresh inputs) has no reason to.
RIGHT_ON_THE_CPU = {
    "test_decoder_layer": {"cross_attention_detached", "own_causal_mask_made_on_the_cpu"},
    "test_decoder": {"layers_under_no_grad", "scale_as_a_cpu_tensor"},
    "test_make_padding_mask": {"mask_made_on_the_cpu_then_cleared"},
    "test_transformer": {"decode_under_no_grad", "default_masks_made_on_the_cpu"},
}
