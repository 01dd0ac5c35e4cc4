"""Variants for 05_positional_encoding: BUGGY ones must fail their grade cell, CORRECT ones pass.

Each source runs after the setup cell and the solution cells (so `torch`, `nn`, `math`, `np` and
the solution `sinusoidal_positional_encoding` exist) and replaces the solution of the same name.
"""


def _table(
    angle_line: str,
    fill: str = """
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
""",
    two_i: str = "torch.arange(0, d_model, 2, dtype=torch.float32)",
    pos: str = "torch.arange(max_len, dtype=torch.float32)[:, None]",
) -> str:
    return (
        f"""
def sinusoidal_positional_encoding(max_len, d_model):
    pos = {pos}
    two_i = {two_i}
    {angle_line}"""
        + fill
    )


_OK_ANGLE = "angle = pos / 10000 ** (two_i / d_model)"


def _module(init: str, forward: str) -> str:
    return (
        """
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
"""
        + init
        + """
    def forward(self, x):
"""
        + forward
    )


_BUFFER = """        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
"""

BUGGY = {
    "test_sinusoidal_positional_encoding": {
        "sin_and_cos_swapped": _table(
            _OK_ANGLE,
            """
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(angle)
    pe[:, 1::2] = torch.sin(angle)
    return pe
""",
        ),
        "exponent_i_over_d": _table("angle = pos / 10000 ** ((two_i / 2) / d_model)"),
        "exponent_floor_divided": _table("angle = pos / 10000 ** (two_i // d_model)"),
        "positions_start_at_1": _table(
            _OK_ANGLE, pos="torch.arange(1, max_len + 1, dtype=torch.float32)[:, None]"
        ),
        "base_1000": _table("angle = pos / 1000 ** (two_i / d_model)"),
        "own_exponent_per_column": """
def sinusoidal_positional_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)
    angle = pos / 10000 ** (j / d_model)
    pe = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, 1::2])
    return pe
""",
        "column_index_doubled": """
def sinusoidal_positional_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)
    angle = pos / 10000 ** (2 * j / d_model)
    pe = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, 0::2])
    return pe
""",
        "sines_then_cosines_in_blocks": _table(
            _OK_ANGLE,
            """
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
""",
        ),
        "multiplies_instead_of_divides": _table("angle = pos * 10000 ** (two_i / d_model)"),
        "returns_float64": """
def sinusoidal_positional_encoding(max_len, d_model):
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return torch.from_numpy(pe)
""",
        "returns_numpy": """
def sinusoidal_positional_encoding(max_len, d_model):
    pos = np.arange(max_len)[:, None]
    angle = pos / 10000 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model), dtype=np.float32)
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe
""",
        "transposed_table": _table(
            _OK_ANGLE,
            """
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.T
""",
        ),
        "integer_positions_floor_divided": _table("angle = pos // 10000 ** (two_i / d_model)"),
        "calls_the_reference": """
from course_grading.reference.positional import sinusoidal_positional_encoding
""",
    },
    "test_positional_encoding": {
        "table_is_a_parameter": _module(
            """        self.pe = nn.Parameter(sinusoidal_positional_encoding(max_len, d_model))
""",
            """        return self.dropout(x + self.pe[: x.size(1)])
""",
        ),
        "frozen_parameter_still_a_parameter": _module(
            """        self.pe = nn.Parameter(sinusoidal_positional_encoding(max_len, d_model), requires_grad=False)
""",
            """        return self.dropout(x + self.pe[: x.size(1)])
""",
        ),
        "plain_tensor_attribute": _module(
            """        self.pe = sinusoidal_positional_encoding(max_len, d_model)
""",
            """        return self.dropout(x + self.pe[: x.size(1)])
""",
        ),
        # passes every CPU case, crashes on a GPU: the buffer moves, the table used does not
        "table_recomputed_on_the_cpu_in_forward": _module(
            _BUFFER,
            """        return self.dropout(x + sinusoidal_positional_encoding(x.size(1), x.size(2)))
""",
        ),
        "table_not_sliced": _module(
            _BUFFER,
            """        return self.dropout(x + self.pe)
""",
        ),
        "sliced_by_batch_size": _module(
            _BUFFER,
            """        return self.dropout(x + self.pe[: x.size(0)])
""",
        ),
        "unsqueezed_buffer_sliced_on_the_wrong_axis": _module(
            """        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model)[None])
""",
            """        return self.dropout(x + self.pe[: x.size(1)])
""",
        ),
        "off_by_one_rows": _module(
            _BUFFER,
            """        return self.dropout(x + self.pe[1: x.size(1) + 1])
""",
        ),
        "adds_in_place": _module(
            _BUFFER,
            """        x += self.pe[: x.size(1)]
        return self.dropout(x)
""",
        ),
        "dropout_on_the_table_only": _module(
            _BUFFER,
            """        return x + self.dropout(self.pe[: x.size(1)])
""",
        ),
        "dropout_ignored": _module(
            _BUFFER,
            """        return x + self.pe[: x.size(1)]
""",
        ),
        "max_len_default_512": """
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])
""",
        "multiplies": _module(
            _BUFFER,
            """        return self.dropout(x * self.pe[: x.size(1)])
""",
        ),
        "subclasses_the_reference": """
from course_grading.reference.positional import PositionalEncoding
""",
        # a float64 table (NumPy) in a float32 model: float32 embeddings come out float64
        "float64_numpy_buffer": _module(
            """        pos = np.arange(max_len)[:, None]
        angle = pos / 10000 ** (np.arange(0, d_model, 2) / d_model)
        table = np.zeros((max_len, d_model))
        table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
        self.register_buffer("pe", torch.from_numpy(table))
""",
            """        return self.dropout(x + self.pe[: x.size(1)])
""",
        ),
    },
}

CORRECT = {
    "test_sinusoidal_positional_encoding": {
        "exp_log_div_term": """
def sinusoidal_positional_encoding(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
""",
        "numpy_then_float32": """
def sinusoidal_positional_encoding(max_len, d_model):
    pos = np.arange(max_len)[:, None]
    angle = pos / np.power(10000.0, np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return torch.tensor(pe, dtype=torch.float32)
""",
        "python_loops": """
def sinusoidal_positional_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe
""",
        "stack_and_flatten_float64_inside": """
def sinusoidal_positional_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = pos * freq
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()
""",
        # harvardnlp/annotated-transformer, the_annotated_transformer.py, PositionalEncoding:
        # "computed once in log space", integer positions times a float32 div_term
        "annotated_transformer_log_space": """
def sinusoidal_positional_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
""",
        # d2l-ai/d2l-en, chapter_attention-mechanisms-and-transformers/
        # self-attention-and-positional-encoding.md, PositionalEncoding: float32 angles from
        # torch.pow, written into a (1, max_len, d) table; here its one row of positions
        "d2l_pow_float32": """
def sinusoidal_positional_encoding(max_len, d_model):
    P = torch.zeros((1, max_len, d_model))
    X = torch.arange(max_len, dtype=torch.float32).reshape(
        -1, 1) / torch.pow(10000, torch.arange(
        0, d_model, 2, dtype=torch.float32) / d_model)
    P[:, :, 0::2] = torch.sin(X)
    P[:, :, 1::2] = torch.cos(X)
    return P[0]
""",
        # phlippe/uvadlc_notebooks, tutorial6/Transformers_and_MHAttention.ipynb,
        # PositionalEncoding (itself from PyTorch's transformer tutorial): float positions
        "uva_tutorial6_float_positions": """
def sinusoidal_positional_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
""",
    },
    "test_positional_encoding": {
        "persistent_buffer": _module(
            _BUFFER,
            """        return self.dropout(x + self.pe[: x.size(1)])
""",
        ),
        "batch_axis_buffer_sliced_on_seq": _module(
            """        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model).unsqueeze(0), persistent=False)
""",
            """        return self.dropout(x + self.pe[:, : x.shape[1], :])
""",
        ),
        "narrow_and_functional_dropout": """
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x):
        return nn.functional.dropout(x + self.table.narrow(0, 0, x.size(1)), self.p, self.training)
""",
        # harvardnlp/annotated-transformer, the_annotated_transformer.py, PositionalEncoding:
        # its own float32 table, (1, max_len, d) persistent buffer (dropout argument reordered
        # to the contract's signature)
        "annotated_transformer": """
class PositionalEncoding(nn.Module):
    "Implement the PE function."

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super(PositionalEncoding, self).__init__()
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
""",
        # pytorch/tutorials, beginner_source/transformer_tutorial.py, PositionalEncoding: a
        # sequence-first (max_len, 1, d) buffer; the contract is batch first, so the rows are
        # moved to the batch axis when added
        "pytorch_tutorial_sequence_first_buffer": """
class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)

        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe[:x.size(1)].transpose(0, 1)
        return self.dropout(x)
""",
        # phlippe/uvadlc_notebooks, tutorial6/Transformers_and_MHAttention.ipynb,
        # PositionalEncoding: non-persistent (1, max_len, d) buffer (plus the contract's dropout)
        "uva_tutorial6_non_persistent": """
class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe, persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.pe[:, :x.size(1)]
        return self.dropout(x)
""",
    },
}


# Buggy variants whose outputs are right for every input on the CPU: the bug shows on another
# device, in the gradients or on a non-contiguous view, which the hidden checks try and the
# integrity audit (outputs on fresh inputs) has no reason to.
RIGHT_ON_THE_CPU = {
    "test_positional_encoding": {"table_recomputed_on_the_cpu_in_forward"},
}
