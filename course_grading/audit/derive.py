"""Which aten operators each forbidden built-in reaches on the CPU, found by running it.

The checks name the built-ins an exercise may not call ("torch.softmax",
"torch.nn.MultiheadAttention.forward"). ``PROBES`` calls each of them on small inputs, the ways
an exercise could (masks, dtypes, with and without gradients, PyTorch's fast paths), and
``reached`` records under a dispatch mode every operator a call reaches below torch's own
decompositions: what the audit's kernels at the dispatcher see.

Not every operator reached is evidence: ``torch.softmax(x, 0, dtype=...)`` reaches
``aten::_to_copy``, attention reaches ``aten::bmm``, ``one_hot`` reaches ``aten::scatter_``, and
honest code reaches them too. An operator is *specific* to a set of built-ins when one of them
reaches it, the honest toolkit (``HONEST``, plus the built-ins the exercise allows) does not, and
it is either private (``aten::_softmax``) or named after the built-in itself
(``aten::embedding``): a public operator such as ``aten::aminmax`` is left out even where no
honest probe reaches it, since a student may call it by name. Where a built-in's call reaches
no specific operator, the operator named after it is recorded instead (``aten::cosine_similarity``
and ``aten::one_hot`` decompose into public arithmetic alone), or, for a Python function
(``PYTHON``: ``torch.nn.MultiheadAttention`` returning its weights computes softmax and matrix
products, as honest attention does), the audit event its code is prefixed with in the child;
``uncovered`` lists the calls that would leave no evidence at all.

Running the probes takes seconds; what they find is kept in the grader's cache folder
(``cache_file``) for the next process on the same torch, so a grading worker reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path

from course_utils.forbidden import SOFTMAX_BUILTINS


def _x(*shape, grad=False):
    import torch

    gen = torch.Generator().manual_seed(0)
    return torch.randn(*shape, generator=gen, requires_grad=grad)


def _softmaxes(f):
    return [
        lambda: f(_x(2, 3, 4), -1),
        lambda: f(_x(2, 3, 4, grad=True), 0),
        lambda: f(_x(3, 4), 1, dtype=_f64()),
    ]


def _f64():
    import torch

    return torch.float64


def _mask():
    import torch

    return torch.ones(4, 4).tril().bool()


def _sdpa(f):
    q = lambda grad=False: _x(2, 3, 4, 8, grad=grad)  # noqa: E731
    return [
        lambda: f(q(), q(), q()),
        lambda: f(q(), q(), q(), attn_mask=_mask()),
        lambda: f(q(), q(), q(), is_causal=True),
        lambda: f(q(True), q(), q(), dropout_p=0.0),
        lambda: f(q().double(), q().double(), q().double(), attn_mask=~_mask()),
    ]


def _module(cls, *args, inputs=1, **kwargs):
    """Calls of ``cls(*args, **kwargs)``: in eval mode without gradients, batch first (PyTorch's
    fast path), and in training mode with gradients, sequence first."""
    import torch

    def call(train):
        m = cls(*args, **kwargs, **({"batch_first": not train} if "batch_first" in _params(cls) else {}))
        m.train(train)
        xs = [_x(2, 4, 8, grad=train) for _ in range(inputs)]
        with torch.enable_grad() if train else torch.no_grad():
            return m(*xs)

    return [lambda t=t: call(t) for t in (False, True)]


def _params(cls):
    import inspect

    return inspect.signature(cls).parameters


def _mha_calls():
    import torch.nn as nn

    def call(need_weights, train):
        m = nn.MultiheadAttention(8, 2, batch_first=True).train(train)
        return m(_x(2, 4, 8), _x(2, 4, 8), _x(2, 4, 8), need_weights=need_weights)

    return [lambda n=n, t=t: call(n, t) for n in (False, True) for t in (False, True)]


def _mha_forward():
    import torch.nn.functional as F

    w, b, o = _x(24, 8), _x(24), _x(8, 8)
    return [
        lambda n=n: F.multi_head_attention_forward(
            _x(4, 2, 8),
            _x(4, 2, 8),
            _x(4, 2, 8),
            8,
            2,
            w,
            b,
            None,
            None,
            False,
            0.0,
            o,
            None,
            training=False,
            need_weights=n,
        )
        for n in (False, True)
    ]


# The built-ins an honest solution may call unless its own exercise forbids them, by the thing
# they compute (attention and the transformer's layers are never among them: the exercises write
# those by hand, and later ones call the learner's own). Every check's list is some of these
# groups and attention's built-ins (tests/test_audit_evidence.py).
SOFTMAX = tuple(SOFTMAX_BUILTINS)  # 03's softmax forbids them all
ELEMENTARY = {
    "softmax": SOFTMAX,
    "layer_norm": (
        "torch.nn.LayerNorm.forward",
        "torch.nn.functional.layer_norm",
        "torch.layer_norm",
        "torch.native_layer_norm",
    ),
    "cosine_similarity": ("torch.nn.functional.cosine_similarity", "torch.cosine_similarity"),
    "embedding": ("torch.nn.functional.embedding", "torch.embedding"),
    "one_hot": ("torch.nn.functional.one_hot",),
}


# Python functions that reach no specific operator: the child prefixes their code with an audit
# event ("python::NAME", ``hooks.mark_python``), recorded under NAME; by the built-ins that call them
PYTHON = {"multi_head_attention_forward": "torch.nn.functional.multi_head_attention_forward"}
CALLS_PYTHON = {
    "torch.nn.MultiheadAttention.forward": "multi_head_attention_forward",
    "torch.nn.functional.multi_head_attention_forward": "multi_head_attention_forward",
}


def allowed_for(builtins) -> tuple[str, ...]:
    """The elementary built-ins an exercise that forbids ``builtins`` lets honest code call."""
    return tuple(b for group in ELEMENTARY.values() if not set(group) & set(builtins) for b in group)


def _probes() -> dict:
    """{built-in as the checks name it: [calls of it]}."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    ids, table = (lambda: torch.tensor([[1, 2], [3, 0]])), (lambda: _x(5, 3, grad=True))
    dec = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    layer = lambda cls: cls(**dec)  # noqa: E731
    return {
        "torch.softmax": _softmaxes(torch.softmax),
        "torch.nn.functional.softmax": _softmaxes(F.softmax),
        "torch.Tensor.softmax": _softmaxes(torch.Tensor.softmax),
        "torch.special.softmax": _softmaxes(torch.special.softmax),
        "torch.log_softmax": _softmaxes(torch.log_softmax),
        "torch.nn.functional.log_softmax": _softmaxes(F.log_softmax),
        "torch.Tensor.log_softmax": _softmaxes(torch.Tensor.log_softmax),
        "torch.nn.Softmax.forward": [
            lambda: nn.Softmax(-1)(_x(2, 3)),
            lambda: nn.Softmax(0)(_x(2, 3, grad=True)),
        ],
        "torch.nn.functional.scaled_dot_product_attention": _sdpa(F.scaled_dot_product_attention),
        "torch.nn.MultiheadAttention.forward": _mha_calls(),
        "torch.nn.functional.multi_head_attention_forward": _mha_forward(),
        "torch.nn.TransformerEncoderLayer.forward": _module(nn.TransformerEncoderLayer, **dec),
        "torch.nn.TransformerDecoderLayer.forward": _module(nn.TransformerDecoderLayer, inputs=2, **dec),
        "torch.nn.TransformerEncoder.forward": _module(
            nn.TransformerEncoder, layer(nn.TransformerEncoderLayer), 2, enable_nested_tensor=False
        ),
        "torch.nn.TransformerDecoder.forward": _module(
            nn.TransformerDecoder, layer(nn.TransformerDecoderLayer), 2, inputs=2
        ),
        "torch.nn.Transformer.forward": _module(nn.Transformer, 8, 2, 1, 1, 16, 0.0, inputs=2),
        "torch.nn.LayerNorm.forward": [
            lambda: nn.LayerNorm(8)(_x(2, 8)),
            lambda: nn.LayerNorm(8)(_x(2, 8, grad=True)),
        ],
        "torch.nn.functional.layer_norm": [
            lambda: F.layer_norm(_x(2, 8), (8,)),
            lambda: F.layer_norm(_x(2, 8, grad=True), (8,), _x(8), _x(8)),
        ],
        "torch.layer_norm": [lambda: torch.layer_norm(_x(2, 8), (8,))],
        "torch.native_layer_norm": [lambda: torch.native_layer_norm(_x(2, 8), (8,), None, None, 1e-5)],
        "torch.nn.functional.cosine_similarity": [
            lambda: F.cosine_similarity(_x(3, 5), _x(1, 5)),
            lambda: F.cosine_similarity(_x(3, 5, grad=True), _x(3, 5), 0),
        ],
        "torch.cosine_similarity": [lambda: torch.cosine_similarity(_x(3, 5), _x(3, 5))],
        "torch.nn.functional.embedding": [
            lambda: F.embedding(ids(), table()),
            lambda: F.embedding(ids(), table(), padding_idx=0),
        ],
        "torch.embedding": [lambda: torch.embedding(table(), ids())],
        "torch.nn.functional.one_hot": [lambda: F.one_hot(ids()), lambda: F.one_hot(ids(), 6)],
    }


def _honest() -> list:
    """What honest solutions call: the arithmetic every exercise may use."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def attention(grad):
        q = _x(2, 3, 4, 8, grad=grad)
        s = (q @ q.transpose(-2, -1)) / 8**0.5
        s = s.masked_fill(~_mask(), float("-inf"))
        w = (s - s.amax(-1, keepdim=True)).exp()
        out = (w / w.sum(-1, keepdim=True)) @ q
        out = out.transpose(1, 2).contiguous().view(2, 4, 24).reshape(2, 4, 3, 8).permute(0, 2, 1, 3)
        return (
            torch.bmm(out.flatten(0, 1), q.flatten(0, 1).mT),
            torch.matmul(out, q.mT),
            torch.einsum("bhij->bij", s),
        )

    def norms(grad):
        x = _x(3, 5, grad=grad)
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        y = (x - mean) / torch.sqrt(var + 1e-5) * torch.rsqrt(var + 1) + x.std(-1, keepdim=True) ** 2
        n = (
            x.norm(dim=-1, keepdim=True)
            + torch.linalg.norm(x, dim=-1, keepdim=True)
            + torch.linalg.vector_norm(x)
        )
        return (
            y,
            x / n.clamp(min=1e-8),
            (x * x).sum(-1).sqrt().clamp_min(1e-8),
            x @ x.T,
            torch.dot(x[0], x[1]),
        )

    def lookups():
        table, idx = _x(5, 3), torch.tensor([[1, 2], [3, 0]])
        zeros = torch.zeros(4, 5).scatter_(1, idx[:, :1], 1.0)
        eq = (idx[..., None] == torch.arange(5)).float()
        return table[idx], table.index_select(0, idx.flatten()), zeros, eq, int(idx.max()) + 1, idx.tolist()

    def layers(grad):
        x = _x(2, 4, 8, grad=grad)
        lin = nn.Linear(8, 16)
        h = F.gelu(lin(x)) + F.relu(lin(x)) + torch.tanh(lin(x)) + nn.Dropout(0.1).eval()(lin(x))
        tri = torch.triu(torch.ones(4, 4), 1).bool() | torch.tril(torch.ones(4, 4)).bool()
        return (
            h.to(torch.float64).float(),
            tri,
            torch.cat([x, x], -1),
            torch.stack([x, x]),
            x.split(4, -1),
            x.chunk(2, -1),
            torch.where(tri, 0.0, 1.0),
            x.max(-1),
            torch.empty(2),
            torch.ones_like(x),
        )

    return (
        [lambda g=g: attention(g) for g in (False, True)]
        + [lambda g=g: norms(g) for g in (False, True)]
        + [lookups]
        + [lambda g=g: layers(g) for g in (False, True)]
    )


def reached(call) -> frozenset:
    """Every aten operator ("aten::_softmax.default") ``call`` reaches below the decompositions."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.name())
            return func(*args, **(kwargs or {}))

    with Record(), torch.random.fork_rng():
        call()
    return frozenset(seen)


def base(op: str) -> str:
    """ "aten::_softmax.out" -> "_softmax"."""
    return op.split("::", 1)[-1].split(".", 1)[0]


def own_names(builtins) -> set[str]:
    """The operator names a built-in goes by: "torch.nn.LayerNorm.forward" -> layer_norm,
    "torch.special.softmax" -> softmax and special_softmax."""
    names = set()
    for builtin in builtins:
        parts = [p for p in builtin.split(".") if p != "forward"]
        snake = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", parts[-1]).lower()
        names |= {snake} | ({f"special_{snake}"} if "special" in parts else set())
    return names


@lru_cache(maxsize=1)
def _reached_by() -> tuple[dict, frozenset]:
    """({built-in: [the operators each of its calls reached]}, what honest calls reach): read
    from ``cache_file()`` where a run of this very module on this torch left it, else run."""
    path = cache_file()
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        return (
            {name: [frozenset(ops) for ops in calls] for name, calls in stored["found"].items()},
            frozenset(stored["honest"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # none yet, or unreadable: run the probes
    found, honest = run_probes()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_text(
            json.dumps(
                {"found": {k: [sorted(o) for o in v] for k, v in found.items()}, "honest": sorted(honest)}
            ),
            encoding="utf-8",
        )
        os.replace(part, path)  # whole or not at all: two workers may write it at once
    except OSError:
        pass  # a home that cannot be written: the next process runs the probes again
    return found, honest


def run_probes() -> tuple[dict, frozenset]:
    """What ``_reached_by`` returns, found by running every probe (about 4 CPU-seconds)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's advice on its fast paths
        found = {name: [reached(call) for call in calls] for name, calls in _probes().items()}
        honest = frozenset().union(*(reached(call) for call in _honest()))
    return found, honest


def cache_file() -> Path:
    """Where ``_reached_by`` keeps its findings: the grader's own cache folder (a sandboxed
    process sees an empty private $HOME, never this), named by everything they depend on (this
    module's source, torch's version and CPU capability, Python's), so that nothing stale is read.
    Each grading worker would otherwise run the probes at its first audit."""
    import platform

    import torch

    key = hashlib.sha256(Path(__file__).read_bytes())
    for part in (torch.__version__, torch.backends.cpu.get_cpu_capability(), sys.version, platform.machine()):
        key.update(b"\0" + part.encode())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attention-course" / f"derived-operators-{key.hexdigest()[:20]}.json"


def specific(builtins, allowed=()) -> frozenset:
    """The operator names (no namespace, no overload) specific to ``builtins``: reached by one of
    them, by none of ``allowed`` (built-ins the exercise may call) nor by honest arithmetic, and
    private or named after one of them; for a call that reaches none, the operator named after
    its built-in, where one exists."""
    import torch

    found, honest = _reached_by()
    shared = {base(op) for op in honest}
    for name in allowed:
        shared |= {base(op) for ops in found.get(name, ()) for op in ops}
    names = set()
    for builtin in builtins:
        own = own_names([builtin])
        for ops in found.get(builtin, ()):
            hits = {base(op) for op in ops} - shared
            hits = {op for op in hits if op.startswith("_") or op in own}
            if not hits:
                hits = {name for name in own if hasattr(torch.ops.aten, name)} | (
                    {CALLS_PYTHON[builtin]} if builtin in CALLS_PYTHON else set()
                )
            names |= hits
    return frozenset(names)


def recorded() -> frozenset:
    """Every operator name that ``specific`` gives for some exercise's built-ins: what the audit's
    child records. (A built-in's operators are fewest when the most is allowed beside it, and a
    call that then reaches none is recorded by its built-in's own operator.)"""
    names = set()
    for builtin in _reached_by()[0]:
        names |= specific([builtin]) | specific([builtin], allowed_for([builtin]))
    return frozenset(names)


def uncovered(builtins, allowed=()) -> list[str]:
    """The built-ins of ``builtins`` with a call that reaches no operator of ``specific``."""
    found, _ = _reached_by()
    spot = specific(builtins, allowed)
    return sorted(
        {
            b
            for b in builtins
            for ops in found.get(b, ())
            if not {base(op) for op in ops} & spot
            and not own_names([b]) & spot
            and CALLS_PYTHON.get(b) not in spot
        }
    )
