"""Variants for 06_encoder: BUGGY must fail their grade cell, CORRECT must pass it.

Each source runs after the notebook's setup and solution cells, replacing one class.
"""

_LN = """
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
{body}
"""


def _ln(body: str) -> str:
    return _LN.format(body=body)


_FF = """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
{body}
"""


def _ff(body: str) -> str:
    return _FF.format(body=body)


_EL = """
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def attn(self, x, mask):
        return self.dropout(self.self_attn(x, x, x, mask)[0])

    def forward(self, x, mask=None):
{body}
"""


def _el(body: str) -> str:
    return _EL.format(body=body)


POST = """\
        x = self.norm1(x + self.attn(x, mask))
        x = self.norm2(x + self.dropout(self.ffn(x)))
        return x"""
PRE = """\
        x = x + self.attn(self.norm1(x), mask)
        return x + self.dropout(self.ffn(self.norm2(x)))"""

_ENC = """
class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512, dropout=0.0):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])

    def forward(self, src, src_mask=None):
{body}
"""


def _enc(body: str) -> str:
    return _ENC.format(body=body)


BUGGY = {
    "test_layer_norm": {
        # fine on the CPU, a crash on a GPU: eps as a CPU tensor of one element
        "eps_as_a_cpu_tensor": _ln("""\
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + torch.Tensor([self.eps])) + self.bias"""),
        "unbiased_variance": _ln("""\
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + self.eps) + self.bias"""),
        "torch_std_unbiased": _ln("""\
        return self.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps) + self.bias"""),
        "eps_outside_sqrt": _ln("""\
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / (torch.sqrt(var) + self.eps) + self.bias"""),
        "wrong_axis": _ln("""\
        mean = x.mean(-2, keepdim=True)
        var = ((x - mean) ** 2).mean(-2, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias"""),
        "all_axes": _ln("""\
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias"""),
        "no_beta": _ln("""\
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps)"""),
        "eps_ignored": _ln("""\
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + 1e-5) + self.bias"""),
        "uses_nn_layer_norm": """
class LayerNorm(nn.LayerNorm):
    pass
""",
        "uses_F_layer_norm": _ln("""\
        return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)"""),
        "aliased_layer_norm": """
from torch.nn.functional import layer_norm as _normalise
"""
        + _ln("""\
        return _normalise(x, x.shape[-1:], self.weight, self.bias, self.eps)"""),
        "wraps_reference": """
from course_grading.reference.encoder import LayerNorm as _RefLN
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.inner = _RefLN(d_model, eps)
        self.weight, self.bias = self.inner.weight, self.inner.bias

    def forward(self, x):
        return self.inner(x)
""",
        "plain_tensors": """
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.ones(d_model)
        self.bias = torch.zeros(d_model)

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias
""",
        "not_implemented": _ln("""\
        raise NotImplementedError()"""),
        # the contract's formula with the Annotated Transformer's default eps = 1e-6
        "default_eps_1e-6": """
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias
""",
    },
    "test_feed_forward": {
        # its own dropout mask drawn on the CPU: crashes on a GPU in training mode
        "dropout_mask_drawn_on_the_cpu": _ff("""\
        h = torch.relu(self.linear1(x))
        if self.training and self.dropout.p > 0:
            h = h * (torch.rand(h.shape) >= self.dropout.p) / (1 - self.dropout.p)
        return self.linear2(h)"""),
        "relu_after_linear2": _ff("""\
        return torch.relu(self.linear2(self.dropout(self.linear1(x))))"""),
        "dropout_after_linear2": _ff("""\
        return self.dropout(self.linear2(torch.relu(self.linear1(x))))"""),
        "no_relu": _ff("""\
        return self.linear2(self.dropout(self.linear1(x)))"""),
        "gelu": _ff("""\
        return self.linear2(self.dropout(nn.functional.gelu(self.linear1(x))))"""),
        "relu_on_input": _ff("""\
        return self.linear2(self.linear1(torch.relu(x)))"""),
        "dropout_ignored": """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))
""",
        "sequential_names": """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)
""",
    },
    "test_encoder_layer": {
        # right values, no training: the layer runs under torch.no_grad()
        "forward_under_no_grad": _el(
            """\
        with torch.no_grad():
            if self.norm_first:
"""
            + PRE.replace("        ", "                ")
            + """
"""
            + POST.replace("        ", "            ")
        ),
        "padding_mask_rebuilt_on_the_cpu": _el(
            """\
        if mask is not None:
            mask = mask & torch.ones(mask.shape, dtype=torch.bool)
        if self.norm_first:
"""
            + PRE.replace("        ", "            ")
            + """
"""
            + POST
        ),
        "always_pre_norm": _el(PRE),
        "always_post_norm": _el(POST),
        "norm_first_swapped": _el(f"""\
        if not self.norm_first:
{PRE.replace("        ", "            ")}
{POST}"""),
        "no_attention_residual": _el(
            """\
        if self.norm_first:
"""
            + PRE.replace("        ", "            ")
            + """
        x = self.norm1(self.attn(x, mask))
        return self.norm2(x + self.dropout(self.ffn(x)))"""
        ),
        "no_ffn_residual": _el(
            """\
        if self.norm_first:
"""
            + PRE.replace("        ", "            ")
            + """
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(self.dropout(self.ffn(x)))"""
        ),
        "pre_norm_residual_on_h": _el(
            """\
        if self.norm_first:
            h = self.norm1(x)
            x = h + self.attn(h, mask)
            h = self.norm2(x)
            return h + self.dropout(self.ffn(h))
"""
            + POST
        ),
        "norm_before_add": _el(
            """\
        if self.norm_first:
"""
            + PRE.replace("        ", "            ")
            + """
        x = x + self.norm1(self.attn(x, mask))
        return x + self.norm2(self.ffn(x))"""
        ),
        "mask_ignored": _el(
            """\
        mask = None
        if self.norm_first:
"""
            + PRE.replace("        ", "            ")
            + "\n"
            + POST
        ),
        "returns_weights_too": _el("""\
        out, w = self.self_attn(x, x, x, mask)
        x = self.norm1(x + out)
        return self.norm2(x + self.ffn(x)), w"""),
        "uses_torch_layer": """
class EncoderLayer(nn.TransformerEncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, batch_first=True, norm_first=norm_first)
""",
    },
    "test_encoder": {
        "embeddings_detached": _enc("""\
        x = self.pos_encoding(self.embedding(src).detach() * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, src_mask)
        return x"""),
        "scale_as_a_cpu_tensor": _enc("""\
        x = self.pos_encoding(self.embedding(src) * torch.sqrt(torch.Tensor([self.d_model])))
        for layer in self.layers:
            x = layer(x, src_mask)
        return x"""),
        "no_sqrt_scale": _enc("""\
        x = self.pos_encoding(self.embedding(src))
        for layer in self.layers:
            x = layer(x, src_mask)
        return x"""),
        "no_positions": _enc("""\
        x = self.embedding(src) * math.sqrt(self.d_model)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x"""),
        "scale_by_d_model": _enc("""\
        x = self.pos_encoding(self.embedding(src) * self.d_model)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x"""),
        "mask_not_passed": _enc("""\
        x = self.pos_encoding(self.embedding(src) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x)
        return x"""),
        "layers_not_chained": _enc("""\
        x0 = self.pos_encoding(self.embedding(src) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x0, src_mask)
        return x"""),
        "float32_output": _enc("""\
        x = self.pos_encoding(self.embedding(src) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, src_mask)
        return x.float()"""),
        "learned_positions": """
class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512, dropout=0.0):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])

    def forward(self, src, src_mask=None):
        pos = torch.arange(src.size(1), device=src.device)
        x = self.embedding(src) * math.sqrt(self.d_model) + self.pos_embedding(pos)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x
""",
    },
}

CORRECT = {
    "test_layer_norm": {
        "torch_var_biased": _ln("""\
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(torch.var(x, -1, unbiased=False, keepdim=True) + self.eps) + self.bias"""),
        "mean_of_squares": _ln("""\
        mean = x.mean(-1, keepdim=True)
        var = x.pow(2).mean(-1, keepdim=True) - mean.pow(2)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias"""),
        "var_mean_correction0": _ln("""\
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
        return self.weight * ((x - mean) / (var + self.eps).sqrt()) + self.bias"""),
        "einsum_style_and_warns": """
import warnings as _w
"""
        + _ln("""\
        _w.warn("a harmless warning")
        d = x.shape[-1]
        mean = torch.einsum("...d->...", x)[..., None] / d
        c = x - mean
        var = torch.einsum("...d,...d->...", c, c)[..., None] / d
        return torch.einsum("d,...d->...d", self.weight, c / torch.sqrt(var + self.eps)) + self.bias"""),
        "prints": _ln("""\
        print("normalising", x.shape)
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias"""),
        # rasbt/LLMs-from-scratch, ch04/01_main-chapter-code/gpt.py, LayerNorm (scale and shift
        # renamed weight and bias, eps made the contract's argument)
        "llms_from_scratch": """
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        norm_x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight * norm_x + self.bias
""",
    },
    "test_feed_forward": {
        "nn_relu_module": """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.act = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.dropout(self.act(self.linear1(x))))
""",
        "clamp_and_einsum": _ff("""\
        h = torch.einsum("...d,fd->...f", x, self.linear1.weight) + self.linear1.bias
        h = self.dropout(h.clamp(min=0))
        return torch.einsum("...f,df->...d", h, self.linear2.weight) + self.linear2.bias"""),
        "functional_relu": _ff("""\
        return self.linear2(self.dropout(nn.functional.relu(self.linear1(x))))"""),
        # harvardnlp/annotated-transformer, the_annotated_transformer.py,
        # PositionwiseFeedForward (w_1, w_2 renamed linear1, linear2)
        "annotated_transformer": """
class FeedForward(nn.Module):
    "Implements FFN equation."

    def __init__(self, d_model, d_ff, dropout=0.0):
        super(FeedForward, self).__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x).relu()))
""",
        # phlippe/uvadlc_notebooks, tutorial6, EncoderBlock.linear_net: dropout BEFORE an
        # in-place ReLU (the same thing); the Sequential's layers named as the contract asks
        "uva_tutorial6_dropout_then_inplace_relu": """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.relu = nn.ReLU(inplace=True)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.relu(self.dropout(self.linear1(x))))
""",
        # pytorch/pytorch, torch/nn/modules/transformer.py, TransformerEncoderLayer._ff_block
        "pytorch_ff_block": """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = nn.functional.relu

    def forward(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return x
""",
    },
    "test_encoder_layer": {
        "precomputed_branches": _el("""\
        if self.norm_first:
            h = self.norm1(x)
            a = self.self_attn(h, h, h, mask)[0]
            x = x + self.dropout(a)
            f = self.ffn(self.norm2(x))
            return x + self.dropout(f)
        a = self.self_attn(x, x, x, mask)[0]
        x = self.norm1(x + self.dropout(a))
        f = self.ffn(x)
        return self.norm2(x + self.dropout(f))"""),
        "reference_parts": """
from course_grading.reference.encoder import FeedForward as _RefFF, LayerNorm as _RefLN
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = _RefFF(d_model, d_ff, dropout)
        self.norm1, self.norm2 = _RefLN(d_model), _RefLN(d_model)
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        sub = [lambda h: self.self_attn(h, h, h, mask)[0], self.ffn]
        for f, norm in zip(sub, (self.norm1, self.norm2)):
            x = x + self.drop(f(norm(x))) if self.norm_first else norm(x + self.drop(f(x)))
        return x
""",
        "torch_layer_norm_parts_and_warns": """
import warnings as _w
"""
        + _el(
            """\
        _w.warn("deprecated something")
        if self.norm_first:
"""
            + PRE.replace("        ", "            ")
            + "\n"
            + POST
        )
        .replace("self.norm1 = LayerNorm(d_model)", "self.norm1 = nn.LayerNorm(d_model)")
        .replace("self.norm2 = LayerNorm(d_model)", "self.norm2 = nn.LayerNorm(d_model)"),
        # pytorch/pytorch, torch/nn/modules/transformer.py, TransformerEncoderLayer.forward with
        # its _sa_block and _ff_block (the course's attention and feed-forward as the parts)
        "pytorch_sa_block_ff_block": """
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src, mask=None):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, mask))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask):
        x = self.self_attn(x, x, x, attn_mask)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.ffn(x))
""",
        # phlippe/uvadlc_notebooks, tutorial6, EncoderBlock: post-norm (its only form), with the
        # contract's pre-norm branch beside it
        "uva_tutorial6_encoder_block": """
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask=mask)[0])
            return x + self.dropout(self.ffn(self.norm2(x)))
        # Attention part
        attn_out = self.self_attn(x, x, x, mask=mask)[0]
        x = x + self.dropout(attn_out)
        x = self.norm1(x)

        # MLP part
        linear_out = self.ffn(x)
        x = x + self.dropout(linear_out)
        x = self.norm2(x)

        return x
""",
        # harvardnlp/annotated-transformer, the_annotated_transformer.py, EncoderLayer with
        # SublayerConnection (pre-norm: x + dropout(sublayer(norm(x)))), and the post-norm
        # form the paper uses; the norms named norm1, norm2 as the contract asks
        "annotated_sublayer_connection": """
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def sublayer(self, x, norm, sublayer):
        "Apply residual connection to any sublayer with the same size."
        if self.norm_first:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))

    def forward(self, x, mask=None):
        x = self.sublayer(x, self.norm1, lambda x: self.self_attn(x, x, x, mask)[0])
        return self.sublayer(x, self.norm2, self.ffn)
""",
    },
    "test_encoder": {
        "positions_on_the_fly": """
class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512, dropout=0.0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.drop = nn.Dropout(dropout)

    def forward(self, src, src_mask=None):
        e = self.embedding(src)
        d = e.shape[-1]
        x = self.drop(e * d ** 0.5 + sinusoidal_positional_encoding(src.shape[1], d).to(e))
        for layer in self.layers:
            x = layer(x, src_mask)
        return x
""",
        "reference_layers": """
from course_grading.reference.encoder import EncoderLayer as _RefLayer
"""
        + _enc("""\
        x = self.embedding(src) * math.sqrt(self.d_model)
        x = self.pos_encoding(x)
        for layer in self.layers:
            x = layer(x, mask=src_mask)
        return x""").replace("[EncoderLayer(", "[_RefLayer("),
        # harvardnlp/annotated-transformer, the_annotated_transformer.py: Embeddings (lut
        # renamed embedding) and PositionalEncoding, its table built once in float32 and cast
        # by .double() with the module; the Encoder stack without the final LayerNorm of its
        # pre-norm layers (the contract's layers are post-norm)
        "annotated_transformer_float32_table": """
class AnnotatedPositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len=5000):
        super(AnnotatedPositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)
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


class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512, dropout=0.0):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = AnnotatedPositionalEncoding(d_model, dropout, max_len)
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])

    def forward(self, src, src_mask=None):
        x = self.pos_encoding(self.embedding(src) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, src_mask)
        return x
""",
        # the positions computed exactly, in the embeddings' own dtype (float64 in a float64
        # model), on every call
        "exact_table_in_the_input_dtype": """
class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512, dropout=0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.drop = nn.Dropout(dropout)

    def forward(self, src, src_mask=None):
        e = self.embedding(src)
        pos = torch.arange(src.size(1), dtype=e.dtype, device=e.device)[:, None]
        two_i = torch.arange(0, self.d_model, 2, dtype=e.dtype, device=e.device)
        angle = pos / 10000 ** (two_i / self.d_model)
        pe = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)
        x = self.drop(e * math.sqrt(self.d_model) + pe)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x
""",
        # d2l-ai/d2l-en, chapter_attention-mechanisms-and-transformers: PositionalEncoding (a
        # plain float32 attribute P moved to the input's device, which .double() leaves
        # float32) and TransformerEncoder.forward (blks renamed layers, X and valid_lens src and src_mask)
        "d2l_plain_attribute_table": '''
class D2LPositionalEncoding(nn.Module):
    """Positional encoding."""
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        # Create a long enough P
        self.P = torch.zeros((1, max_len, num_hiddens))
        X = torch.arange(max_len, dtype=torch.float32).reshape(
            -1, 1) / torch.pow(10000, torch.arange(
            0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        X = X + self.P[:, :X.shape[1], :].to(X.device)
        return self.dropout(X)


class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512, dropout=0.0):
        super().__init__()
        self.num_hiddens = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = D2LPositionalEncoding(d_model, dropout, max_len)
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])

    def forward(self, src, src_mask=None):
        X = self.pos_encoding(self.embedding(src) * math.sqrt(self.num_hiddens))
        for i, blk in enumerate(self.layers):
            X = blk(X, src_mask)
        return X
''',
    },
}


# Buggy variants whose outputs are right for every input on the CPU: the bug shows on another
# device, in the gradients or on a non-contiguous view, which the hidden checks try and the
# integrity audit (outputs on fresh inputs) has no reason to.
RIGHT_ON_THE_CPU = {
    "test_layer_norm": {"eps_as_a_cpu_tensor"},
    "test_feed_forward": {"dropout_mask_drawn_on_the_cpu"},
    "test_encoder_layer": {"forward_under_no_grad", "padding_mask_rebuilt_on_the_cpu"},
    "test_encoder": {"embeddings_detached", "scale_as_a_cpu_tensor"},
}
