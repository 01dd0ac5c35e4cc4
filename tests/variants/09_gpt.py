"""Variants for 09_gpt: BUGGY must fail their grade cell, CORRECT must pass it.

Each source runs after the notebook's setup and solution cells (torch, nn and the building
blocks MultiHeadAttention, split_heads, merge_heads, scaled_dot_product_attention, LayerNorm,
FeedForward and sample_next_token are there), replacing one class or function. The correct
ones are adapted from public code, each naming its source, to the contract's names and its
cache layout (a ``past`` in, a ``present`` out, instead of a cache kept inside the modules).
"""

# -- GPTBlock ------------------------------------------------------------------------------------
_BLOCK = """
class GPTBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ln2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, past=None):
        a, H = self.attn, self.attn.num_heads
        h = {normed}
        Q = split_heads(a.q_proj(h), H)
        K_new = split_heads(a.k_proj(h), H)
        V_new = split_heads(a.v_proj(h), H)
        K, V = K_new, V_new
        if past is not None{use_past}:
            K = torch.cat([past[0], K_new], dim=2)
            V = torch.cat([past[1], V_new], dim=2)
        t, T = x.size(1), K.size(2)
        mask = {mask}
        out, _ = scaled_dot_product_attention(Q, K, V, mask)
        x = {residual}
        x = x + self.dropout(self.ffn(self.ln2(x)))
        return x, {present}
"""
_K = dict(
    normed="self.ln1(x)",
    use_past="",
    mask="torch.ones(t, T, dtype=torch.bool, device=x.device).tril(diagonal=T - t)",
    residual="x + self.dropout(a.out_proj(merge_heads(out)))",
    present="(K, V)",
)


def _block(**changes) -> str:
    return _BLOCK.format(**{**_K, **changes})


# -- GPT -----------------------------------------------------------------------------------------
_GPT = """
class GPT(nn.Module):
    def __init__(self, vocab_size, d_model=128, num_heads=4, d_ff=512, num_layers=4,
                 max_len=256, dropout=0.0):
        super().__init__()
        self.max_len, self.d_model = max_len, d_model
        self.tok_embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([GPTBlock(d_model, num_heads, d_ff, dropout)
                                     for _ in range(num_layers)])
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, ids, past=None):
        t = ids.size(1)
        t_past = {t_past}
        {check}
        positions = {positions}
        x = {embed}
        present = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, {block_past})
            present.append(kv)
        return self.lm_head({final}), present
"""
_M = dict(
    t_past="0 if past is None else past[0][0].size(2)",
    check="""if t_past + t > self.max_len:
            raise ValueError(f"{t_past} + {t} positions pass max_len={self.max_len}")""",
    positions="torch.arange(t_past, t_past + t, device=ids.device)",
    embed="self.tok_embedding(ids) + self.pos_embedding(positions)",
    block_past="None if past is None else past[i]",
    final="self.ln_f(x)",
)


def _gpt(**changes) -> str:
    return _GPT.format(**{**_M, **changes})


# -- generate ------------------------------------------------------------------------------------
_GENERATE = """
@torch.no_grad()
def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    past = None
    for step in range(max_new_tokens):
        if use_cache:
            {cached}
        else:
            logits, _ = model(ids)
        last = logits[:, {position}]
        if temperature == 0:
            next_id = last.argmax(dim=-1)
        else:
            next_id = {draw}
        ids = torch.cat([ids, next_id[:, None]], dim=1)
    return ids
"""
_G = dict(
    cached="logits, past = model(ids if past is None else ids[:, -1:], past)",
    position="-1",
    draw="sample_next_token(last, temperature, top_k, top_p, generator)",
)


def _generate(**changes) -> str:
    return _GENERATE.format(**{**_G, **changes})


BUGGY = {
    "test_gpt_block": {
        # the causal mask of the new positions alone, not shifted by the cached ones: a single
        # new token sees only position 0 of the cache
        "mask_not_shifted_by_the_cache": _block(
            mask="torch.ones(t, T, dtype=torch.bool, device=x.device).tril()"
        ),
        # a mask made for one new token (the last row of a causal mask): right for the steps
        # after the prompt, wrong for a prompt of several tokens
        "mask_for_one_new_token_only": _block(
            mask="torch.ones(T, T, dtype=torch.bool, device=x.device).tril()[-1:]"
        ),
        # no mask once there is a cache: fine for one new token, not for several
        "no_mask_with_a_cache": _block(
            mask="None if past is not None else torch.ones(t, T, dtype=torch.bool, device=x.device).tril()"
        ),
        "cache_not_extended": _block(present="(K_new, V_new)"),
        "past_ignored": _block(use_past=" and False"),
        "keys_from_x_not_ln1": _block(normed="x"),
        # only the keys read x: the queries and values are right, the output and cache not
        "only_keys_from_x": _block().replace(
            "K_new = split_heads(a.k_proj(h), H)", "K_new = split_heads(a.k_proj(x), H)"
        ),
        # the cached keys and values put after the new ones
        "cache_after_the_new_positions": _block()
        .replace("torch.cat([past[0], K_new], dim=2)", "torch.cat([K_new, past[0]], dim=2)")
        .replace("torch.cat([past[1], V_new], dim=2)", "torch.cat([V_new, past[1]], dim=2)"),
        "post_norm": _block(normed="x", residual="self.ln1(x + a.out_proj(merge_heads(out)))"),
        "no_residual_around_attention": _block(residual="a.out_proj(merge_heads(out))"),
        # the mask made on the CPU: right on a CPU, a crash on the first GPU
        "mask_on_the_cpu": _block(mask="torch.ones(t, T, dtype=torch.bool).tril(diagonal=T - t)"),
    },
    "test_gpt": {
        "positions_restart_at_zero": _gpt(positions="torch.arange(t, device=ids.device)"),
        # positions made on the CPU: right on a CPU, a crash on the first GPU
        "positions_on_the_cpu": _gpt(positions="torch.arange(t_past, t_past + t)"),
        "t_past_is_the_number_of_blocks": _gpt(t_past="0 if past is None else len(past)"),
        "no_value_error_past_max_len": _gpt(check="pass"),
        "value_error_ignores_the_cache": _gpt(
            check="""if t > self.max_len:
            raise ValueError(f"{t} positions are more than max_len={self.max_len}")"""
        ),
        "no_final_layer_norm": _gpt(final="x"),
        "every_block_gets_the_first_past": _gpt(block_past="None if past is None else past[0]"),
        # a right GPT over a block whose mask is not shifted by the cached positions
        "block_mask_not_shifted": _block(mask="torch.ones(t, T, dtype=torch.bool, device=x.device).tril()")
        + _gpt(),
        "embeddings_scaled_like_the_encoder": _gpt(
            embed="self.tok_embedding(ids) * math.sqrt(self.d_model) + self.pos_embedding(positions)"
        ),
    },
    "test_generate": {
        # the first step feeds only the prompt's last token
        "first_step_not_the_whole_prompt": _generate(cached="logits, past = model(ids[:, -1:], past)"),
        # the present of the first step is kept for ever
        "cache_not_updated": _generate(
            cached="""if past is None:
                logits, past = model(ids)
            else:
                logits, _ = model(ids[:, -1:], past)"""
        ),
        # the newest token fed without the cache
        "newest_token_without_past": _generate(
            cached="logits, past = (model(ids) if past is None else (model(ids[:, -1:])[0], past))"
        ),
        "first_position": _generate(position="0"),
        "temperature_ignored": _generate(draw="sample_next_token(last, 1.0, top_k, top_p, generator)"),
        "generator_not_passed": _generate(draw="sample_next_token(last, temperature, top_k, top_p)"),
        "always_argmax": _generate(draw="last.argmax(dim=-1)"),
        # the first row's token appended to every row: right for a batch of one
        "batch_of_one": _generate(
            draw="sample_next_token(last, temperature, top_k, top_p, generator)[:1].expand(ids.size(0))"
        ),
    },
}

# Buggy variants whose outputs are right on the CPU: only the hidden checks' second device
# (course_grading/checks/_device.py) shows them; the integrity audit cannot, by design.
RIGHT_ON_THE_CPU = {
    "test_gpt_block": {"mask_on_the_cpu"},
    "test_gpt": {"positions_on_the_cpu"},
}

CORRECT = {
    "test_gpt_block": {
        # Hugging Face transformers, GPT-2 (modeling_gpt2.py, GPT2Attention with layer_past):
        # keys and values concatenated with the past on the sequence dim, the causal mask cut
        # from a full lower triangle as bias[key_length - query_length : key_length, :key_length]
        "hugging_face_gpt2_layer_past": """
class GPTBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ln2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def _split_heads(self, tensor):
        b, t, d = tensor.shape
        return tensor.view(b, t, self.attn.num_heads, d // self.attn.num_heads).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.shape[:-2] + (tensor.size(-2) * tensor.size(-1),))

    def forward(self, x, past=None):
        residual = x
        hidden = self.ln1(x)
        query = self._split_heads(self.attn.q_proj(hidden))
        key = self._split_heads(self.attn.k_proj(hidden))
        value = self._split_heads(self.attn.v_proj(hidden))
        if past is not None:
            past_key, past_value = past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value)
        attn_weights = torch.matmul(query, key.transpose(-1, -2)) / (value.size(-1) ** 0.5)
        query_length, key_length = query.size(-2), key.size(-2)
        bias = torch.tril(torch.ones((key_length, key_length), dtype=torch.bool, device=x.device))
        causal_mask = bias[key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        attn_weights = torch.where(causal_mask, attn_weights,
                                   torch.full([], mask_value, dtype=attn_weights.dtype,
                                              device=attn_weights.device))
        attn_weights = torch.exp(attn_weights - attn_weights.amax(-1, keepdim=True))
        attn_weights = attn_weights / attn_weights.sum(-1, keepdim=True)
        attn_output = self._merge_heads(torch.matmul(attn_weights, value))
        x = residual + self.resid_dropout(self.attn.out_proj(attn_output))
        x = x + self.resid_dropout(self.ffn(self.ln2(x)))
        return x, present
""",
        # rasbt, LLMs-from-scratch, ch04/03_kv-cache/gpt_with_kv_cache.py (MultiHeadAttention
        # with cache_k / cache_v and ptr_current_pos): the upper-triangle mask sliced at the
        # cache's current position, masked_fill_ with -inf; here the cache comes in as `past`
        "rasbt_llms_from_scratch_kv_cache": """
class GPTBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ln2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.drop_shortcut = nn.Dropout(dropout)

    def forward(self, x, past=None):
        shortcut = x
        x = self.ln1(x)
        b, num_tokens, d_out = x.shape
        H = self.attn.num_heads
        head_dim = d_out // H
        keys_new = self.attn.k_proj(x).view(b, num_tokens, H, head_dim).transpose(1, 2)
        values_new = self.attn.v_proj(x).view(b, num_tokens, H, head_dim).transpose(1, 2)
        queries = self.attn.q_proj(x).view(b, num_tokens, H, head_dim).transpose(1, 2)
        if past is None:
            keys, values, ptr_current_pos = keys_new, values_new, 0
        else:
            keys = torch.cat([past[0], keys_new], dim=2)
            values = torch.cat([past[1], values_new], dim=2)
            ptr_current_pos = past[0].size(2)
        attn_scores = queries @ keys.transpose(2, 3)
        num_tokens_K = keys.shape[-2]
        mask = torch.triu(torch.ones(num_tokens_K, num_tokens_K, device=x.device), diagonal=1)
        mask_bool = mask.bool()[ptr_current_pos:ptr_current_pos + num_tokens, :num_tokens_K]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.exp(attn_scores / keys.shape[-1] ** 0.5
                                 - (attn_scores / keys.shape[-1] ** 0.5).amax(-1, keepdim=True))
        attn_weights = attn_weights / attn_weights.sum(-1, keepdim=True)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, d_out)
        x = self.drop_shortcut(self.attn.out_proj(context_vec)) + shortcut
        shortcut = x
        x = self.drop_shortcut(self.ffn(self.ln2(x))) + shortcut
        return x, (keys, values)
""",
        # Hugging Face transformers, OPT (_make_causal_mask with past_key_values_length): a
        # causal mask of the new tokens with an all-visible block for the past in front of it
        "hugging_face_opt_make_causal_mask": """
class GPTBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ln2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)

    def forward(self, x, past=None):
        h = self.ln1(x)
        H = self.attn.num_heads
        Q = split_heads(self.attn.q_proj(h), H)
        K = split_heads(self.attn.k_proj(h), H)
        V = split_heads(self.attn.v_proj(h), H)
        past_key_values_length = 0
        if past is not None:
            past_key_values_length = past[0].size(2)
            K, V = torch.cat([past[0], K], 2), torch.cat([past[1], V], 2)
        tgt_len = x.size(1)
        mask = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=x.device).tril()
        if past_key_values_length > 0:
            mask = torch.cat([torch.ones(tgt_len, past_key_values_length, dtype=torch.bool,
                                         device=x.device), mask], dim=-1)
        out, _ = scaled_dot_product_attention(Q, K, V, mask[None, None])
        x = x + self.attn.out_proj(merge_heads(out))
        return x + self.ffn(self.ln2(x)), (K, V)
""",
    },
    "test_gpt": {
        # rasbt, LLMs-from-scratch, ch04/03_kv-cache/gpt_with_kv_cache.py (GPTModel): position
        # ids from the current position of the cache; here read from the past instead of a
        # counter kept on the model
        "rasbt_llms_from_scratch_gpt_model": """
class GPT(nn.Module):
    def __init__(self, vocab_size, d_model=128, num_heads=4, d_ff=512, num_layers=4,
                 max_len=256, dropout=0.0):
        super().__init__()
        self.tok_embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)
        self.drop_emb = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([GPTBlock(d_model, num_heads, d_ff, dropout)
                                     for _ in range(num_layers)])
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, in_idx, past=None):
        batch_size, seq_len = in_idx.shape
        current_pos = 0 if past is None else past[0][0].shape[2]
        if current_pos + seq_len > self.pos_embedding.num_embeddings:
            raise ValueError("sequence longer than the context length")
        tok_embeds = self.tok_embedding(in_idx)
        pos_ids = torch.arange(current_pos, current_pos + seq_len, device=in_idx.device,
                               dtype=torch.long)
        x = self.drop_emb(tok_embeds + self.pos_embedding(pos_ids).unsqueeze(0))
        present = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, past[i] if past is not None else None)
            present.append(kv)
        return self.lm_head(self.ln_f(x)), present
""",
        # Karpathy, nanoGPT, model.py (GPT.forward): pos = torch.arange(0, t), an assert on
        # block_size; offset by the cache's length, the assert made a ValueError
        "nanogpt_forward_with_offset": """
class GPT(nn.Module):
    def __init__(self, vocab_size, d_model=128, num_heads=4, d_ff=512, num_layers=4,
                 max_len=256, dropout=0.0):
        super().__init__()
        self.block_size = max_len
        self.tok_embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([GPTBlock(d_model, num_heads, d_ff, dropout)
                                     for _ in range(num_layers)])
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, past=None):
        device = idx.device
        b, t = idx.size()
        offset = past[0][0].size(-2) if past else 0
        if offset + t > self.block_size:
            raise ValueError(f"Cannot forward sequence of length {offset + t}, block size is "
                             f"only {self.block_size}")
        pos = torch.arange(offset, offset + t, dtype=torch.long, device=device)
        x = self.drop(self.tok_embedding(idx) + self.pos_embedding(pos))
        presents = [None] * len(self.blocks)
        for i, block in enumerate(self.blocks):
            x, presents[i] = block(x, past[i] if past else None)
        x = self.ln_f(x)
        return self.lm_head(x), presents
""",
    },
    "test_generate": {
        # rasbt, LLMs-from-scratch, ch04/03_kv-cache/gpt_with_kv_cache.py
        # (generate_text_simple_cached): the prompt once, then only the new token; with the
        # contract's past/present and 08's sampler in place of the argmax
        "rasbt_llms_from_scratch_generate_cached": """
def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    def pick(logits):
        if temperature == 0:
            return logits[:, -1].argmax(dim=-1, keepdim=True)
        return sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)[:, None]

    idx = ids
    with torch.no_grad():
        if use_cache:
            if max_new_tokens == 0:
                return idx
            logits, past = model(idx)
            for i in range(max_new_tokens):
                next_idx = pick(logits)
                idx = torch.cat([idx, next_idx], dim=1)
                if i < max_new_tokens - 1:
                    logits, past = model(next_idx, past)
        else:
            for _ in range(max_new_tokens):
                logits, _ = model(idx)
                next_idx = pick(logits)
                idx = torch.cat([idx, next_idx], dim=1)
    return idx
""",
        # Karpathy, nanoGPT, model.py (GPT.generate): the loop over max_new_tokens, the last
        # position's logits, torch.cat of idx_next; with a cache and 08's sampler
        "nanogpt_generate_with_cache": """
@torch.no_grad()
def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    idx, past = ids, None
    for _ in range(max_new_tokens):
        idx_cond = idx if (past is None or not use_cache) else idx[:, -1:]
        logits, present = model(idx_cond, past if use_cache else None)
        if use_cache:
            past = present
        logits = logits[:, -1, :]
        if temperature == 0:
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        else:
            idx_next = sample_next_token(logits, temperature, top_k, top_p, generator)[:, None]
        idx = torch.cat((idx, idx_next), dim=1)
    return idx
""",
        # Hugging Face transformers' generation loop (prepare_inputs_for_generation): with
        # past_key_values, only input_ids[:, -1:] go in; the cache is the model output's
        "hugging_face_prepare_inputs_for_generation": """
@torch.no_grad()
def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    input_ids, past_key_values = ids.clone(), None
    while input_ids.size(1) < ids.size(1) + max_new_tokens:
        if past_key_values is not None:
            model_inputs = input_ids[:, -1:]
        else:
            model_inputs = input_ids
        next_token_logits, cache = model(model_inputs, past_key_values)
        next_token_logits = next_token_logits[:, -1, :]
        past_key_values = cache if use_cache else None
        if temperature == 0:
            next_tokens = torch.argmax(next_token_logits, dim=-1)
        else:
            next_tokens = sample_next_token(next_token_logits, temperature=temperature,
                                            top_k=top_k, top_p=top_p, generator=generator)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
    return input_ids
""",
    },
}
