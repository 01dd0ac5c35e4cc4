"""Variants for 05_positional_encoding: BUGGY ones must fail their grade cell, CORRECT ones pass.

Each source runs after the setup cell and the solution cells (so `torch`, `nn`, `math`, `np` and
the solution `sinusoidal_positional_encoding` exist) and replaces the solution of the same name.
"""


def _table(angle_line: str, fill: str = '''
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
''', two_i: str = "torch.arange(0, d_model, 2, dtype=torch.float32)",
           pos: str = "torch.arange(max_len, dtype=torch.float32)[:, None]") -> str:
    return f'''
def sinusoidal_positional_encoding(max_len, d_model):
    pos = {pos}
    two_i = {two_i}
    {angle_line}''' + fill


_OK_ANGLE = "angle = pos / 10000 ** (two_i / d_model)"


def _module(init: str, forward: str) -> str:
    return '''
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
''' + init + '''
    def forward(self, x):
''' + forward


_BUFFER = '''        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
'''

BUGGY = {
    "test_sinusoidal_positional_encoding": {
        "sin_and_cos_swapped": _table(_OK_ANGLE, '''
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(angle)
    pe[:, 1::2] = torch.sin(angle)
    return pe
'''),
        "exponent_i_over_d": _table("angle = pos / 10000 ** ((two_i / 2) / d_model)"),
        "positions_start_at_1": _table(_OK_ANGLE, pos="torch.arange(1, max_len + 1, dtype=torch.float32)[:, None]"),
        "base_1000": _table("angle = pos / 1000 ** (two_i / d_model)"),
        "own_exponent_per_column": '''
def sinusoidal_positional_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)
    angle = pos / 10000 ** (j / d_model)
    pe = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, 1::2])
    return pe
''',
        "column_index_doubled": '''
def sinusoidal_positional_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)
    angle = pos / 10000 ** (2 * j / d_model)
    pe = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, 0::2])
    return pe
''',
        "sines_then_cosines_in_blocks": _table(_OK_ANGLE, '''
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
'''),
        "multiplies_instead_of_divides": _table("angle = pos * 10000 ** (two_i / d_model)"),
        "returns_float64": '''
def sinusoidal_positional_encoding(max_len, d_model):
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return torch.from_numpy(pe)
''',
        "returns_numpy": '''
def sinusoidal_positional_encoding(max_len, d_model):
    pos = np.arange(max_len)[:, None]
    angle = pos / 10000 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model), dtype=np.float32)
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe
''',
        "transposed_table": _table(_OK_ANGLE, '''
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.T
'''),
        "integer_positions_floor_divided": _table("angle = pos // 10000 ** (two_i / d_model)"),
        "calls_the_reference": '''
from course_grading.reference.positional import sinusoidal_positional_encoding
''',
    },
    "test_positional_encoding": {
        "table_is_a_parameter": _module('''        self.pe = nn.Parameter(sinusoidal_positional_encoding(max_len, d_model))
''', '''        return self.dropout(x + self.pe[: x.size(1)])
'''),
        "frozen_parameter_still_a_parameter": _module('''        self.pe = nn.Parameter(sinusoidal_positional_encoding(max_len, d_model), requires_grad=False)
''', '''        return self.dropout(x + self.pe[: x.size(1)])
'''),
        "plain_tensor_attribute": _module('''        self.pe = sinusoidal_positional_encoding(max_len, d_model)
''', '''        return self.dropout(x + self.pe[: x.size(1)])
'''),
        "table_not_sliced": _module(_BUFFER, '''        return self.dropout(x + self.pe)
'''),
        "sliced_by_batch_size": _module(_BUFFER, '''        return self.dropout(x + self.pe[: x.size(0)])
'''),
        "unsqueezed_buffer_sliced_on_the_wrong_axis": _module('''        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model)[None])
''', '''        return self.dropout(x + self.pe[: x.size(1)])
'''),
        "off_by_one_rows": _module(_BUFFER, '''        return self.dropout(x + self.pe[1: x.size(1) + 1])
'''),
        "adds_in_place": _module(_BUFFER, '''        x += self.pe[: x.size(1)]
        return self.dropout(x)
'''),
        "dropout_on_the_table_only": _module(_BUFFER, '''        return x + self.dropout(self.pe[: x.size(1)])
'''),
        "dropout_ignored": _module(_BUFFER, '''        return x + self.pe[: x.size(1)]
'''),
        "max_len_default_512": '''
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])
''',
        "multiplies": _module(_BUFFER, '''        return self.dropout(x * self.pe[: x.size(1)])
'''),
        "subclasses_the_reference": '''
from course_grading.reference.positional import PositionalEncoding
''',
    },
}

CORRECT = {
    "test_sinusoidal_positional_encoding": {
        "exp_log_div_term": '''
def sinusoidal_positional_encoding(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
''',
        "numpy_then_float32": '''
def sinusoidal_positional_encoding(max_len, d_model):
    pos = np.arange(max_len)[:, None]
    angle = pos / np.power(10000.0, np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return torch.tensor(pe, dtype=torch.float32)
''',
        "python_loops": '''
def sinusoidal_positional_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe
''',
        "stack_and_flatten_float64_inside": '''
def sinusoidal_positional_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = pos * freq
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()
''',
    },
    "test_positional_encoding": {
        "persistent_buffer": _module(_BUFFER, '''        return self.dropout(x + self.pe[: x.size(1)])
'''),
        "batch_axis_buffer_sliced_on_seq": _module('''        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model).unsqueeze(0), persistent=False)
''', '''        return self.dropout(x + self.pe[:, : x.shape[1], :])
'''),
        "narrow_and_functional_dropout": '''
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x):
        return nn.functional.dropout(x + self.table.narrow(0, 0, x.size(1)), self.p, self.training)
''',
    },
}
