"""Variants for 03_attention: BUGGY ones must fail their grade cell, CORRECT ones must pass.

Each source replaces the solution's function of the same name; it runs after the setup cell and
the solution cells, so `torch`, `F`, `math` and the other solutions (`softmax`, ...) exist.
"""

BUGGY = {
    "test_softmax": {
        # found by the hidden checks that a CPU-only run misses: gradients, a view, a device
        "through_numpy": """
def softmax(x, dim=-1):
    import numpy as np
    a = x.numpy()
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=dim, keepdims=True))
""",
        "view_breaks_on_a_transposed_input": """
def softmax(x, dim=-1):
    x = x.transpose(dim, -1)
    flat = x.view(-1, x.shape[-1])
    e = torch.exp(flat - flat.max(dim=-1, keepdim=True).values)
    return (e / e.sum(dim=-1, keepdim=True)).view(x.shape).transpose(dim, -1)
""",
        "max_made_on_the_cpu": """
def softmax(x, dim=-1):
    m = torch.zeros(x.shape[:dim % x.dim()] + (1,) + x.shape[dim % x.dim() + 1:], dtype=x.dtype)
    m.copy_(x.amax(dim=dim, keepdim=True))
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)
""",
        "no_max_subtraction": """
def softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
""",
        "hard_coded_dim_1": """
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=1, keepdim=True))
    return e / e.sum(dim=1, keepdim=True)
""",
        "ignores_dim_always_last": """
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
""",
        "sums_over_everything": """
def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum()
""",
        "subtracts_the_min": """
def softmax(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
""",
        "one_global_max_for_all_rows": """
def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)
""",
        "max_without_keepdim": """
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim))
    return e / e.sum(dim=dim)
""",
        "in_place_shift": """
def softmax(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
""",
        "casts_to_float32": """
def softmax(x, dim=-1):
    x = x.float()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
""",
        "calls_F_softmax": """
def softmax(x, dim=-1):
    return F.softmax(x, dim=dim)
""",
        "calls_tensor_softmax_method": """
def softmax(x, dim=-1):
    return x.softmax(dim)
""",
        "exp_of_log_softmax": """
def softmax(x, dim=-1):
    return torch.exp(torch.log_softmax(x, dim=dim))
""",
        "not_implemented": """
def softmax(x, dim=-1):
    raise NotImplementedError()
""",
    },
    "test_simple_self_attention": {
        "softmax_over_dim_minus_2": """
def simple_self_attention(X):
    scores = X @ X.transpose(-2, -1)
    return softmax(scores, dim=-2) @ X
""",
        "no_softmax": """
def simple_self_attention(X):
    return (X @ X.transpose(-2, -1)) @ X
""",
        "X_dot_T_breaks_batches": """
def simple_self_attention(X):
    scores = X @ X.T
    return softmax(scores, dim=-1) @ X
""",
        "scaled_by_sqrt_d": """
def simple_self_attention(X):
    scores = X @ X.transpose(-2, -1) / math.sqrt(X.shape[-1])
    return softmax(scores, dim=-1) @ X
""",
        "returns_the_weights": """
def simple_self_attention(X):
    return softmax(X @ X.transpose(-2, -1), dim=-1)
""",
        "weights_on_the_wrong_side": """
def simple_self_attention(X):
    W = softmax(X @ X.transpose(-2, -1), dim=-1)
    return (X.transpose(-2, -1) @ W).transpose(-2, -1)
""",
        "calls_builtin_attention": """
def simple_self_attention(X):
    return F.scaled_dot_product_attention(X, X, X, scale=1.0)
""",
    },
    "test_scaled_dot_product_attention": {
        "weights_detached": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1).detach()
    return w @ V, w
""",
        # issue 18, section 3, in 03: the scale as a CPU tensor (a GPU raises at that line)
        "scale_is_a_cpu_tensor": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / torch.sqrt(torch.Tensor([K.shape[-1]]))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "fill_tensor_made_on_the_cpu": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.full(scores.shape, float("-inf"), dtype=scores.dtype))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "no_sqrt_d_k": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "scaled_by_sqrt_d_v": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(V.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "scaled_by_d_k": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / Q.size(-1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "d_k_from_dim_1": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "softmax_over_queries": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-2)
    return w @ V, w
""",
        "masked_scores_set_to_zero": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "mask_polarity_reversed": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "mask_applied_after_softmax": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    w = softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1)), dim=-1)
    if mask is not None:
        w = w * mask
    return w @ V, w
""",
        "mask_zero_filled_after_softmax": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    w = softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1)), dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ V, w
""",
        "weights_in_float32": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores.float(), dim=-1)  # float32 whatever came in
    return w.to(V.dtype) @ V, w
""",
        "mask_ignored": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    w = softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1)), dim=-1)
    return w @ V, w
""",
        "unstable_hand_written_softmax": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    w = e / e.sum(dim=-1, keepdim=True)
    return w @ V, w
""",
        "K_dot_T_breaks_batches": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.T / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "returns_weights_then_output": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w, w @ V
""",
        "returns_only_the_output": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return softmax(scores, dim=-1) @ V
""",
        "calls_F_scaled_dot_product_attention": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, softmax(scores, dim=-1)
""",
    },
    "test_causal_mask": {
        "compares_an_arange_made_on_the_cpu": """
def causal_mask(size, device=None):
    return torch.arange(size)[:, None] >= torch.arange(size, device=device)[None, :]
""",
        "upper_triangle": """
def causal_mask(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).triu()
""",
        "diagonal_excluded": """
def causal_mask(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1)
""",
        "float_mask": """
def causal_mask(size, device=None):
    return torch.tril(torch.ones(size, size, device=device))
""",
        "additive_minus_inf_mask": """
def causal_mask(size, device=None):
    return torch.full((size, size), float("-inf"), device=device).triu(1)
""",
        "ignores_device": """
def causal_mask(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()
""",
        "hard_coded_size": """
def causal_mask(size, device=None):
    return torch.ones(4, 4, dtype=torch.bool, device=device).tril()
""",
    },
}

CORRECT = {
    "test_softmax": {
        "logsumexp": """
def softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
""",
        "max_values_unsqueeze": """
def softmax(x, dim=-1):
    m = x.max(dim=dim).values.unsqueeze(dim)
    e = (x - m).exp()
    return e / e.sum(dim, keepdim=True)
""",
        "loop_over_rows": """
def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    rows = []
    for row in flat:
        e = torch.exp(row - row.max())
        rows.append(e / e.sum())
    return torch.stack(rows).reshape(moved.shape).movedim(-1, dim)
""",
        # torch/_decomp/decompositions.py (pytorch/pytorch), the decomposition of aten._softmax
        "pytorch_decomposition": """
def softmax(x, dim=-1):
    x_max = torch.amax(x, dim, keepdim=True)
    unnormalized = torch.exp(x - x_max)
    return unnormalized / torch.sum(unnormalized, dim, keepdim=True)
""",
        # jax.nn.softmax (google/jax, jax/_src/nn/functions.py), in torch: the max is a constant
        "jax_stop_gradient_max": """
def softmax(x, dim=-1):
    unnormalized = torch.exp(x - x.amax(dim, keepdim=True).detach())
    return unnormalized / unnormalized.sum(dim, keepdim=True)
""",
        # the Triton fused-softmax tutorial's naive_softmax (openai/triton,
        # python/tutorials/02-fused-softmax.py), written for rows (dim=1): here for any dim
        "triton_tutorial_naive_softmax": """
def softmax(x, dim=-1):
    x_max = x.max(dim=dim, keepdim=True)[0]
    z = x - x_max
    numerator = torch.exp(z)
    denominator = numerator.sum(dim=dim, keepdim=True)
    return numerator / denominator
""",
        # Hugging Face's eager attention upcasts the softmax to float32 and casts back
        # (transformers, models/llama/modeling_llama.py): for float64 input that rounds the
        # probabilities to float32 (relative error ~6e-8), which the float64 check accepts
        "computes_in_float32_like_hf_upcast": """
def softmax(x, dim=-1):
    x32 = x.float()
    e = torch.exp(x32 - x32.amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)
""",
        "warns_and_writes_to_stderr": """
import sys as _sys
import warnings as _warnings
def softmax(x, dim=-1):
    _warnings.warn("softmax: debugging")
    print("softmax called", file=_sys.stderr)
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
""",
        "prints_debug_output": """
def softmax(x, dim=-1):
    print("x has shape", tuple(x.shape))
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
""",
    },
    "test_simple_self_attention": {
        "einsum": """
def simple_self_attention(X):
    scores = torch.einsum("...id,...jd->...ij", X, X)
    return torch.einsum("...ij,...jd->...id", softmax(scores, dim=-1), X)
""",
        "mT_and_F_softmax": """
def simple_self_attention(X):
    return F.softmax(X @ X.mT, dim=-1) @ X
""",
        "matmul_and_torch_softmax": """
def simple_self_attention(X):
    return torch.matmul(torch.softmax(torch.matmul(X, X.transpose(-1, -2)), dim=-1), X)
""",
    },
    "test_scaled_dot_product_attention": {
        "einsum": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(K.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return torch.einsum("...qk,...kd->...qd", w, V), w
""",
        "fill_minus_1e9": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / Q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == False, -1e9)  # noqa: E712 - a learner's style, kept as written
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "torch_where": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype,
                                                        device=scores.device))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        "F_softmax_inside_is_allowed": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = F.softmax(scores, dim=-1)
    return w @ V, w
""",
        "scale_queries_first_float64_safe": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = torch.tensor(K.shape[-1], dtype=Q.dtype, device=Q.device)
    scores = (Q / d_k.sqrt()) @ K.mT
    if mask is not None:
        neg = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(torch.logical_not(mask), neg)
    w = softmax(scores, dim=-1)
    return torch.matmul(w, V), w
""",
        "additive_mask_from_bool": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        scores = scores + bias.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
        # The Annotated Transformer (harvardnlp/annotated-transformer, the_annotated_transformer.py),
        # attention() without its dropout argument
        "annotated_transformer_attention": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.size(-1)
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, V), p_attn
""",
        # UvA DL tutorial 6 (phlippe/uvadlc_notebooks, Transformers_and_MHAttention.ipynb),
        # scaled_dot_product
        "uva_tutorial6_scaled_dot_product": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.size()[-1]
    attn_logits = torch.matmul(Q, K.transpose(-2, -1))
    attn_logits = attn_logits / math.sqrt(d_k)
    if mask is not None:
        attn_logits = attn_logits.masked_fill(mask == 0, -9e15)
    attention = F.softmax(attn_logits, dim=-1)
    values = torch.matmul(attention, V)
    return values, attention
""",
        # minGPT's CausalSelfAttention (karpathy/minGPT, mingpt/model.py), the mask given
        # instead of its causal buffer
        "mingpt_causal_self_attention": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    att = (Q @ K.transpose(-2, -1)) * (1.0 / math.sqrt(K.size(-1)))
    if mask is not None:
        att = att.masked_fill(mask == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ V
    return y, att
""",
        # LLMs-from-scratch ch03 (rasbt/LLMs-from-scratch, ch03 MultiHeadAttention): masks the
        # raw scores in place, then scales inside the softmax
        "llms_from_scratch_scale_after_masking": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    attn_scores = Q @ K.transpose(-2, -1)
    if mask is not None:
        attn_scores.masked_fill_(~mask, -torch.inf)
    attn_weights = torch.softmax(attn_scores / K.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ V, attn_weights
""",
        # the reference implementation in the docs of torch.nn.functional.scaled_dot_product_attention
        # (pytorch/pytorch, torch/nn/functional.py), its additive bias shaped like the mask
        "pytorch_docs_reference": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scale_factor = 1 / math.sqrt(Q.size(-1))
    attn_weight = Q @ K.transpose(-2, -1) * scale_factor
    if mask is not None:
        attn_bias = torch.zeros(mask.shape, dtype=Q.dtype, device=Q.device)
        attn_bias.masked_fill_(mask.logical_not(), float("-inf"))
        attn_weight = attn_weight + attn_bias
    attn_weight = torch.softmax(attn_weight, dim=-1)
    return attn_weight @ V, attn_weight
""",
        # a float32 constant in the scale (Fabbboy/setis, src/transformer/layer/sdpa.py, and many
        # tutorials): √d_k rounded to float32 moves float64 weights by ~1e-7, which is accepted
        "float32_sqrt_d_k_tensor": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.size(-1)
    scores = torch.matmul(Q, K.transpose(-2, -1)) / torch.sqrt(torch.tensor(d_k, dtype=torch.float32))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    score = torch.nn.Softmax(dim=-1)(scores)
    return torch.matmul(score, V), score
""",
        # Hugging Face's eager attention (transformers, models/llama/modeling_llama.py): an additive
        # mask of the dtype's minimum, and the softmax upcast to float32, then cast back
        "hf_eager_attention_softmax_in_float32": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scaling = Q.shape[-1] ** -0.5
    attn_weights = torch.matmul(Q, K.transpose(-2, -1)) * scaling
    if mask is not None:
        causal_mask = torch.zeros(mask.shape, dtype=attn_weights.dtype, device=Q.device)
        causal_mask = causal_mask.masked_fill(~mask, torch.finfo(attn_weights.dtype).min)
        attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(Q.dtype)
    attn_output = torch.matmul(attn_weights, V)
    return attn_output, attn_weights
""",
        "warns_about_mask": """
import warnings as _warnings
def scaled_dot_product_attention(Q, K, V, mask=None):
    if mask is None:
        _warnings.warn("no mask given: every query sees every key")
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ V, w
""",
    },
    "test_causal_mask": {
        "arange_comparison": """
def causal_mask(size, device=None):
    i = torch.arange(size, device=device)
    return i[:, None] >= i[None, :]
""",
        "tril_of_bool_ones": """
def causal_mask(size, device=None):
    return torch.tril(torch.ones((size, size), device=device)).bool()
""",
        "loop": """
def causal_mask(size, device=None):
    m = torch.zeros(size, size, dtype=torch.bool, device=device)
    for i in range(size):
        m[i, : i + 1] = True
    return m
""",
        # The Annotated Transformer's subsequent_mask (harvardnlp/annotated-transformer), without
        # its leading batch axis of 1
        "annotated_transformer_subsequent_mask": """
def causal_mask(size, device=None):
    attn_shape = (size, size)
    subsequent_mask = torch.triu(torch.ones(attn_shape, device=device), diagonal=1).type(torch.uint8)
    return subsequent_mask == 0
""",
        # nn.Transformer.generate_square_subsequent_mask (pytorch/pytorch, torch/nn/modules/
        # transformer.py) builds the additive -inf mask; the places it leaves at 0 may attend
        "pytorch_square_subsequent_mask": """
def causal_mask(size, device=None):
    additive = torch.triu(torch.full((size, size), float("-inf"), device=device), diagonal=1)
    return additive == 0
""",
        # LLMs-from-scratch ch03 registers triu(ones, diagonal=1) as the positions to hide
        "llms_from_scratch_not_hidden": """
def causal_mask(size, device=None):
    mask = torch.triu(torch.ones(size, size, device=device), diagonal=1)
    return ~mask.bool()
""",
        "not_triu": """
def causal_mask(size, device=None):
    return ~torch.ones(size, size, dtype=torch.bool, device=device).triu(1)
""",
    },
}


# Buggy variants whose outputs are right for every input on the CPU: the bug shows on another
# device, in the gradients or on a non-contiguous view, which the hidden checks try and the
# integrity audit (outputs on fresh inputs) has no reason to.
RIGHT_ON_THE_CPU = {
    "test_softmax": {"through_numpy", "view_breaks_on_a_transposed_input", "max_made_on_the_cpu"},
    "test_causal_mask": {"compares_an_arange_made_on_the_cpu"},
    "test_scaled_dot_product_attention": {
        "weights_detached",
        "scale_is_a_cpu_tensor",
        "fill_tensor_made_on_the_cpu",
    },
}
