"""Variants for 01_embeddings: BUGGY ones must fail their grade cell, CORRECT ones must pass.

Each source replaces the solution's function of the same name; it runs after the setup cell and
the solution cells, so `np` and the other solutions (`one_hot`, `encode`, ...) exist.
"""

BUGGY = {
    "test_encode": {
        "drops_unknown_tokens": """
def encode(tokens, vocab, unk_token="<unk>"):
    return [vocab[t] for t in tokens if t in vocab]
""",
        "hard_codes_unk_string": """
def encode(tokens, vocab, unk_token="<unk>"):
    return [vocab.get(t, vocab["<unk>"]) for t in tokens]
""",
        "hard_codes_unk_id_0": """
def encode(tokens, vocab, unk_token="<unk>"):
    return [vocab.get(t, 0) for t in tokens]
""",
        "unk_id_is_len_vocab": """
def encode(tokens, vocab, unk_token="<unk>"):
    return [vocab.get(t, len(vocab)) for t in tokens]
""",
        "keyerror_on_unknown": """
def encode(tokens, vocab, unk_token="<unk>"):
    return [vocab[t] for t in tokens]
""",
        "returns_numpy_array": """
def encode(tokens, vocab, unk_token="<unk>"):
    return np.array([vocab.get(t, vocab[unk_token]) for t in tokens])
""",
        "numpy_ints_in_list": """
def encode(tokens, vocab, unk_token="<unk>"):
    return list(np.array([vocab.get(t, vocab[unk_token]) for t in tokens], dtype=np.int64))
""",
        "maps_unknown_to_unk_token_string": """
def encode(tokens, vocab, unk_token="<unk>"):
    return [vocab[t] if t in vocab else unk_token for t in tokens]
""",
        "not_implemented": """
def encode(tokens, vocab, unk_token="<unk>"):
    raise NotImplementedError()
""",
    },
    "test_one_hot": {
        "transposed": """
def one_hot(ids, vocab_size):
    return np.eye(vocab_size)[:, np.asarray(ids)]
""",
        "int_dtype": """
def one_hot(ids, vocab_size):
    return np.eye(vocab_size, dtype=int)[np.asarray(ids)]
""",
        "bool_dtype": """
def one_hot(ids, vocab_size):
    ids = np.asarray(ids)
    return ids[..., None] == np.arange(vocab_size)
""",
        "flattens_the_ids": """
def one_hot(ids, vocab_size):
    return np.eye(vocab_size)[np.ravel(ids)]
""",
        "zeros_len_ids_by_V": """
def one_hot(ids, vocab_size):
    ids = np.asarray(ids)
    out = np.zeros((len(ids), vocab_size))
    out[np.arange(len(ids)), ids] = 1.0
    return out
""",
        "off_by_one": """
def one_hot(ids, vocab_size):
    return np.eye(vocab_size)[np.asarray(ids) - 1]
""",
        "vocab_size_from_max_id": """
def one_hot(ids, vocab_size):
    ids = np.asarray(ids)
    return np.eye(ids.max() + 1)[ids]
""",
        "calls_torch_one_hot": """
import torch
def one_hot(ids, vocab_size):
    return torch.nn.functional.one_hot(torch.as_tensor(np.asarray(ids)), vocab_size).double().numpy()
""",
        "calls_the_reference": """
from course_grading.reference.embeddings import one_hot as _ref
def one_hot(ids, vocab_size):
    return _ref(ids, vocab_size)
""",
        "not_implemented": """
def one_hot(ids, vocab_size):
    raise NotImplementedError()
""",
    },
    "test_embed": {
        "looks_up_columns": """
def embed(ids, E):
    return np.asarray(E)[:, np.asarray(ids)].T
""",
        "looks_up_columns_of_transpose": """
def embed(ids, E):
    return np.asarray(E).T[np.asarray(ids)]
""",
        "flattens_the_ids": """
def embed(ids, E):
    return np.asarray(E)[np.ravel(ids)]
""",
        "take_without_axis": """
def embed(ids, E):
    return np.take(E, ids)
""",
        "one_hot_with_d_instead_of_V": """
def embed(ids, E):
    E = np.asarray(E)
    return one_hot(ids, E.shape[1]) @ E
""",
        "normalises_rows": """
def embed(ids, E):
    E = np.asarray(E)
    return (E / np.linalg.norm(E, axis=1, keepdims=True))[np.asarray(ids)]
""",
        "modifies_E_in_place": """
def embed(ids, E):
    E *= 1.0000001
    return E[np.asarray(ids)]
""",
        "square_E_transposed_when_square": """
def embed(ids, E):
    E = np.asarray(E)
    if E.shape[0] == E.shape[1]:
        E = E.T
    return E[np.asarray(ids)]
""",
        "calls_torch_embedding": """
import torch
def embed(ids, E):
    return torch.nn.functional.embedding(torch.as_tensor(np.asarray(ids)), torch.as_tensor(E)).numpy()
""",
        "not_implemented": """
def embed(ids, E):
    raise NotImplementedError()
""",
    },
}

CORRECT = {
    "test_encode": {
        "loop_with_try_except": """
def encode(tokens, vocab, unk_token="<unk>"):
    out = []
    for t in tokens:
        try:
            out.append(vocab[t])
        except KeyError:
            out.append(vocab[unk_token])
    return out
""",
        "conditional_expression": """
def encode(tokens, vocab, unk_token="<unk>"):
    return [vocab[t] if t in vocab else vocab[unk_token] for t in tokens]
""",
        "map_with_get": """
def encode(tokens, vocab, unk_token="<unk>"):
    unk = vocab[unk_token]
    return list(map(lambda t: vocab.get(t, unk), tokens))
""",
        "numpy_then_tolist": """
def encode(tokens, vocab, unk_token="<unk>"):
    return np.array([vocab.get(t, vocab[unk_token]) for t in tokens], dtype=np.int64).tolist()
""",
        "warns_about_unknown_tokens": """
import warnings
def encode(tokens, vocab, unk_token="<unk>"):
    unknown = [t for t in tokens if t not in vocab]
    if unknown:
        warnings.warn(f"{len(unknown)} unknown tokens mapped to {unk_token}")
    return [vocab.get(t, vocab[unk_token]) for t in tokens]
""",
        "prints_to_stderr": """
import sys
def encode(tokens, vocab, unk_token="<unk>"):
    print("encoding", len(tokens), "tokens", file=sys.stderr)
    return [vocab.get(t, vocab[unk_token]) for t in tokens]
""",
    },
    "test_one_hot": {
        "identity_rows": """
def one_hot(ids, vocab_size):
    return np.eye(vocab_size)[np.asarray(ids)]
""",
        "float32_identity": """
def one_hot(ids, vocab_size):
    return np.eye(vocab_size, dtype=np.float32)[np.asarray(ids)]
""",
        "zeros_and_put_along_axis": """
def one_hot(ids, vocab_size):
    ids = np.asarray(ids)
    out = np.zeros(ids.shape + (vocab_size,))
    np.put_along_axis(out, ids[..., None], 1.0, axis=-1)
    return out
""",
        "loop_over_ndindex": """
def one_hot(ids, vocab_size):
    ids = np.asarray(ids)
    out = np.zeros((*ids.shape, vocab_size))
    for idx in np.ndindex(ids.shape):
        out[idx + (ids[idx],)] = 1.0
    return out
""",
        "flatten_then_reshape": """
def one_hot(ids, vocab_size):
    ids = np.asarray(ids)
    flat = ids.reshape(-1)
    out = np.zeros((flat.size, vocab_size))
    out[np.arange(flat.size), flat] = 1
    return out.reshape(ids.shape + (vocab_size,))
""",
        "warns": """
import warnings
def one_hot(ids, vocab_size):
    warnings.warn("one-hot vectors are wasteful; prefer embed")
    return np.identity(vocab_size)[np.asarray(ids)]
""",
    },
    "test_embed": {
        "one_hot_matmul": """
def embed(ids, E):
    E = np.asarray(E)
    return one_hot(ids, E.shape[0]) @ E
""",
        "take_axis_0": """
def embed(ids, E):
    return np.take(np.asarray(E), np.asarray(ids), axis=0)
""",
        "einsum_with_one_hot": """
def embed(ids, E):
    E = np.asarray(E)
    return np.einsum("...v,vd->...d", one_hot(ids, len(E)), E)
""",
        "loop_and_reshape": """
def embed(ids, E):
    ids = np.asarray(ids)
    rows = [E[i] for i in ids.reshape(-1)]
    return np.array(rows).reshape(ids.shape + (E.shape[1],))
""",
        "float32_copy": """
def embed(ids, E):
    return np.asarray(E, dtype=np.float32)[np.asarray(ids)]
""",
        "prints_to_stderr": """
import sys
def embed(ids, E):
    print("looking up", np.size(ids), "ids", file=sys.stderr)
    return np.asarray(E)[np.asarray(ids)]
""",
    },
}
