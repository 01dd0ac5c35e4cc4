"""Variants for 08_generation: BUGGY must fail their grade cell, CORRECT must pass it.

Each source runs after the notebook's setup and solution cells (torch and causal_mask are
there), replacing one function.
"""

# -- greedy_decode -----------------------------------------------------------------------------
_GREEDY = """
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    memory = model.encode(src, {encode_mask})
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while {loop}:
        L = ys.size(1)
        logits = model.decode(ys, memory, causal_mask(L, device=src.device), {decode_mask})
        next_id = logits[:, {position}].argmax(dim=-1)
        {pad}
        ys = torch.cat([ys, next_id[:, None]], dim=1)
        done = done | (next_id == eos_id)
    return ys
"""
_G = dict(
    encode_mask="src_mask",
    decode_mask="src_mask",
    position="-1",
    loop="ys.size(1) < max_len and not done.all()",
    pad="next_id = torch.where(done, torch.full_like(next_id, eos_id), next_id)",
)


def _greedy(**changes) -> str:
    return _GREEDY.format(**{**_G, **changes})


# -- sample_next_token -------------------------------------------------------------------------
_SAMPLE = """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    z = {scale}
    if top_k is not None:
        k = {k}
        kth = torch.topk(z, k, dim=-1, largest={largest}).values[:, -1:]
        z = z.masked_fill({kmask}, float("-inf"))
    if top_p is not None:
        probs, order = torch.sort(torch.softmax(z, dim=-1), dim=-1, descending=True)
        {drop_sorted}
        drop = {unsort}
        z = z.masked_fill(drop, float("-inf"))
    probs = torch.softmax(z, dim=-1)
    return {draw}
"""
_S = dict(
    scale="logits / temperature",
    k="min(top_k, z.size(-1))",
    largest="True",
    kmask="z < kth",
    drop_sorted="drop_sorted = torch.cumsum(probs, dim=-1) - probs >= top_p",
    unsort="torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)",
    draw="torch.multinomial(probs, 1, generator=generator).squeeze(-1)",
)


def _sample(**changes) -> str:
    return _SAMPLE.format(**{**_S, **changes})


# -- beam_search -------------------------------------------------------------------------------
_BEAM = """
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=1.0):
    memory = model.encode(src)
    live, finished = [(0.0, [bos_id])], []
    while live and len(live[0][1]) < max_len:
        L = len(live[0][1])
        ys = torch.tensor([t for _, t in live], dtype=torch.long, device=src.device)
        logits = model.decode(ys, memory.expand(len(live), -1, -1), causal_mask(L, device=src.device))
        logp = torch.log_softmax(logits[:, -1].double(), dim=-1).cpu()
        cands = [({extend}, t + [v]) for i, (s, t) in enumerate(live) for v in range(logp.size(-1))]
        {select}
    def norm(c):
        return {norm}
    return torch.tensor(max(finished + live, key=norm)[1], dtype=torch.long, device=src.device)
"""
_B = dict(
    extend="s + float(logp[i, v])",
    select="""cands.sort(key=lambda c: c[0], reverse=True)
        best = cands[:beam_size]
        finished += [c for c in best if c[1][-1] == eos_id]
        live = [c for c in best if c[1][-1] != eos_id]""",
    norm="c[0] / (len(c[1]) - 1) ** length_penalty",
)


def _beam(**changes) -> str:
    return _BEAM.format(**{**_B, **changes})


BUGGY = {
    "test_greedy_decode": {
        # right on the CPU, a crash (or a result off the device) on a GPU
        "ys_made_on_the_cpu": _greedy().replace(
            "bos_id, dtype=torch.long, device=src.device)", "bos_id, dtype=torch.long)"
        ),
        "causal_mask_made_on_the_cpu": _greedy().replace(
            "causal_mask(L, device=src.device)", "causal_mask(L)"
        ),
        "finished_flags_on_the_cpu": _greedy().replace(
            "torch.zeros(src.size(0), dtype=torch.bool, device=src.device)",
            "torch.zeros(src.size(0), dtype=torch.bool)",
        ),
        "first_position": _greedy(position="0"),
        "no_stop_at_eos": _greedy(loop="ys.size(1) < max_len"),
        "no_eos_padding": _greedy(pad="pass"),
        "stops_when_any_row_done": _greedy(loop="ys.size(1) < max_len and not done.any()"),
        "max_len_new_tokens": _greedy(loop="ys.size(1) <= max_len and not done.all()"),
        "ignores_src_mask": _greedy(encode_mask="None", decode_mask="None"),
        "src_mask_only_to_encode": _greedy(decode_mask="None"),
        "not_implemented": """
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    raise NotImplementedError()
""",
        # only the last position is read, so the causal mask looks unnecessary: with two or
        # more decoder layers the earlier positions then see later tokens, and the last one too
        "no_causal_mask": _greedy().replace("causal_mask(L, device=src.device)", "None"),
        # PyTorch's convention (True = masked) where the course's is True = may attend
        "pytorch_convention_mask": _greedy().replace(
            "causal_mask(L, device=src.device)", "~causal_mask(L, device=src.device)"
        ),
        # pytorch/tutorials, beginner_source/translation_transformer.py: the additive float
        # mask (0 / -inf) of generate_square_subsequent_mask, where the course's model takes
        # a bool mask
        "float_additive_mask": _greedy().replace(
            "causal_mask(L, device=src.device)",
            "torch.triu(torch.full((L, L), float('-inf'), device=src.device), diagonal=1)",
        ),
        "calls_reference": """
from course_grading.reference.generation import greedy_decode as _ref_greedy
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    return _ref_greedy(model, src, max_len, bos_id, eos_id, src_mask)
""",
    },
    "test_sample_next_token": {
        "draws_on_the_cpu": _sample(
            draw="torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1)"
        ),
        "unsorts_into_a_cpu_tensor": _sample(
            unsort="torch.zeros(drop_sorted.shape, dtype=torch.bool).scatter(-1, order, drop_sorted)"
        ),
        "keeps_the_first_with_a_cpu_arange": _sample(
            drop_sorted="drop_sorted = (torch.cumsum(probs, dim=-1) - probs >= top_p) "
            "& (torch.arange(probs.size(-1)) > 0)"
        ),
        "temperature_multiplied": _sample(scale="logits * temperature"),
        "top_k_keeps_lowest": _sample(largest="False", kmask="z > kth"),
        # torch.topk refuses a k larger than the row: a top_k beyond the vocabulary must keep all
        "top_k_beyond_vocab_raises": _sample(k="top_k"),
        "top_p_drops_crossing_token": _sample(
            drop_sorted="drop_sorted = torch.cumsum(probs, dim=-1) > top_p\n        drop_sorted[:, 0] = False"
        ),
        "top_p_unsorted": _sample(
            drop_sorted="drop_sorted = torch.cumsum(torch.softmax(z, -1), dim=-1) - "
            "torch.softmax(z, -1) >= top_p",
            unsort="drop_sorted",
        ),
        "top_p_mask_not_unsorted": _sample(unsort="drop_sorted"),
        "argmax_not_sampling": _sample(draw="probs.argmax(dim=-1)"),
        "ignores_generator": _sample(draw="torch.multinomial(probs, 1).squeeze(-1)"),
        "no_squeeze": _sample(draw="torch.multinomial(probs, 1, generator=generator)"),
        "in_place": _sample(scale="logits.div_(temperature)"),
        # top_p before top_k: the nucleus of the whole distribution, then cut to k
        "top_p_before_top_k": """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    z = logits / temperature
    if top_p is not None:
        probs, order = torch.sort(torch.softmax(z, dim=-1), dim=-1, descending=True)
        drop_sorted = torch.cumsum(probs, dim=-1) - probs >= top_p
        z = z.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), float("-inf"))
    if top_k is not None:
        kth = torch.topk(z, min(top_k, z.size(-1)), dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.multinomial(torch.softmax(z, dim=-1), 1, generator=generator).squeeze(-1)
""",
        # top_p measured on the probabilities of the full softmax, not renormalised after top_k
        "top_p_not_renormalised_after_top_k": """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    z = logits / temperature
    full = torch.softmax(z, dim=-1)
    if top_k is not None:
        kth = torch.topk(z, min(top_k, z.size(-1)), dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        kept = full.masked_fill(z == float("-inf"), 0.0)
        probs, order = torch.sort(kept, dim=-1, descending=True)
        drop_sorted = torch.cumsum(probs, dim=-1) - probs >= top_p
        z = z.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), float("-inf"))
    return torch.multinomial(torch.softmax(z, dim=-1), 1, generator=generator).squeeze(-1)
""",
        # the filters on the raw logits, the temperature only for the final softmax
        "temperature_after_filtering": """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    z = logits.clone()
    if top_k is not None:
        kth = torch.topk(z, min(top_k, z.size(-1)), dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        probs, order = torch.sort(torch.softmax(z, dim=-1), dim=-1, descending=True)
        drop_sorted = torch.cumsum(probs, dim=-1) - probs >= top_p
        z = z.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), float("-inf"))
    return torch.multinomial(torch.softmax(z / temperature, dim=-1), 1, generator=generator).squeeze(-1)
""",
        # rasbt/LLMs-from-scratch, ch05 generate(): the k-th logit taken as top_logits[:, -1],
        # shape (b,), which does not broadcast per row over (b, vocab) for a batch
        "llms_from_scratch_threshold_not_per_row": """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if top_k is not None:
        top_logits, _ = torch.topk(logits, top_k)
        min_val = top_logits[:, -1]
        logits = torch.where(logits < min_val, torch.tensor(float("-inf")).to(logits.device), logits)
    logits = logits / temperature
    if top_p is not None:
        probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True)
        drop_sorted = torch.cumsum(probs, dim=-1) - probs >= top_p
        logits = logits.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
""",
    },
    "test_beam_search": {
        "hypotheses_made_on_the_cpu": _beam().replace(
            "ys = torch.tensor([t for _, t in live], dtype=torch.long, device=src.device)",
            "ys = torch.tensor([t for _, t in live], dtype=torch.long)",
        ),
        "causal_mask_made_on_the_cpu": _beam().replace("causal_mask(L, device=src.device)", "causal_mask(L)"),
        "returns_a_cpu_tensor": _beam().replace(
            "key=norm)[1], dtype=torch.long, device=src.device)", "key=norm)[1], dtype=torch.long)"
        ),
        "not_length_normalised": _beam(norm="c[0]"),
        "normalised_by_length_with_bos": _beam(norm="c[0] / len(c[1]) ** length_penalty"),
        "last_token_score_only": _beam(extend="float(logp[i, v])"),
        "finished_stay_in_beam": _beam(
            select="""cands += [c for c in finished]
        cands.sort(key=lambda c: c[0], reverse=True)
        best = cands[:beam_size]
        finished = [c for c in best if c[1][-1] == eos_id]
        live = [c for c in best if c[1][-1] != eos_id]"""
        ),
        "eos_is_an_ordinary_token": _beam(
            select="""cands.sort(key=lambda c: c[0], reverse=True)
        live = cands[:beam_size]"""
        ),
        "no_causal_mask": _beam().replace("causal_mask(L, device=src.device)", "None"),
        # topk over every extension without a cap: at the first step there are only vocab-size
        # candidates, and a beam wider than that raises (the message names the input)
        "topk_wider_than_the_candidates": """
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=1.0):
    memory = model.encode(src)
    live = torch.full((1, 1), bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(1, dtype=torch.float64, device=src.device)
    done = []
    while len(live) and live.size(1) < max_len:
        out = model.decode(live, memory, causal_mask(live.size(1), device=src.device))
        total = scores[:, None] + torch.log_softmax(out[:, -1].double(), -1)
        V = total.size(1)
        val, idx = total.view(-1).topk(beam_size)
        ext = torch.cat([live[idx // V], (idx % V)[:, None]], 1)
        ends = ext[:, -1] == eos_id
        done += list(zip(val[ends].tolist(), ext[ends]))
        live, scores = ext[~ends], val[~ends]
    pool = done + list(zip(scores.tolist(), live))
    return max(pool, key=lambda p: p[0] / (p[1].numel() - 1) ** length_penalty)[1]
""",
        "beam_per_hypothesis": _beam(
            select="""best = []
        for i in range(len(live)):
            mine = cands[i * logp.size(-1):(i + 1) * logp.size(-1)]
            best += sorted(mine, key=lambda c: -c[0])[:beam_size]
        finished += [c for c in best if c[1][-1] == eos_id]
        live = [c for c in best if c[1][-1] != eos_id]"""
        ),
    },
}

CORRECT = {
    "test_greedy_decode": {
        "preallocated": """
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        ys = torch.full((src.shape[0], max_len), eos_id, dtype=torch.long, device=src.device)
        ys[:, 0] = bos_id
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        L = 1
        while L < max_len:
            out = model.decode(ys[:, :L], memory, causal_mask(L, device=src.device), src_mask)
            tok = torch.argmax(out[:, L - 1, :], dim=-1)
            tok[finished] = eos_id
            ys[:, L] = tok
            finished |= tok == eos_id
            L += 1
            if bool(finished.all()):
                break
        return ys[:, :L]
""",
        "python_lists_and_warning": """
import warnings
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    warnings.warn("decoding on the CPU, this may take a moment")
    print("decoding", src.shape)
    memory = model.encode(src, src_mask)
    rows = [[bos_id] for _ in range(src.size(0))]
    while len(rows[0]) < max_len and not all(eos_id in r[1:] for r in rows):
        ys = torch.tensor(rows, device=src.device)
        logits = model.decode(ys, memory, causal_mask(ys.size(1), device=src.device), src_mask)
        best = logits[:, -1].argmax(-1).tolist()
        for r, t in zip(rows, best):
            r.append(eos_id if eos_id in r[1:] else t)
    return torch.tensor(rows, dtype=torch.long, device=src.device)
""",
        # harvardnlp/annotated-transformer, the_annotated_transformer.py, greedy_decode: its
        # loop of max_len - 1 steps with torch.max over the last position, decode called with
        # the contract's arguments (which returns logits: no separate generator call), batched,
        # and the contract's stop at eos
        "annotated_transformer": """
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    memory = model.encode(src, src_mask)
    ys = torch.zeros(src.size(0), 1).fill_(bos_id).type_as(src.data)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for i in range(max_len - 1):
        if bool(finished.all()):
            break
        out = model.decode(ys, memory, causal_mask(ys.size(1), device=src.device), src_mask)
        _, next_word = torch.max(out[:, -1], dim=1)
        next_word = next_word.masked_fill(finished, eos_id)
        finished = finished | (next_word == eos_id)
        ys = torch.cat([ys, next_word[:, None].type_as(src.data)], dim=1)
    return ys
""",
        # pytorch/tutorials, beginner_source/translation_transformer.py, greedy_decode: one
        # sentence at a time (batch first, the course's bool causal mask, no device moves), then
        # the rows padded with eos to one length
        "pytorch_tutorial_one_sentence_at_a_time": """
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    rows = []
    for b in range(src.size(0)):
        one_src = src[b:b + 1]
        one_mask = None if src_mask is None else src_mask[b:b + 1]
        memory = model.encode(one_src, one_mask)
        ys = torch.ones(1, 1).fill_(bos_id).type(torch.long).to(src.device)
        for i in range(max_len - 1):
            tgt_mask = causal_mask(ys.size(1), device=src.device)
            out = model.decode(ys, memory, tgt_mask, one_mask)
            _, next_word = torch.max(out[:, -1], dim=1)
            next_word = next_word.item()
            ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=1)
            if next_word == eos_id:
                break
        rows.append(ys[0].tolist())
    width = max(len(r) for r in rows)
    return torch.tensor([r + [eos_id] * (width - len(r)) for r in rows], dtype=torch.long,
                        device=src.device)
""",
        "no_mask_on_last_position": """
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    memory = model.encode(src, src_mask)
    ys = torch.full((len(src), 1), bos_id, dtype=torch.long, device=src.device)
    for _ in range(max_len - 1):
        if (ys == eos_id).any(dim=1).all():
            break
        logits = model.decode(ys, memory, causal_mask(ys.shape[1], src.device), src_mask)
        nxt = logits[:, -1, :].max(dim=-1).indices
        nxt = nxt.masked_fill((ys == eos_id).any(dim=1), eos_id)
        ys = torch.cat((ys, nxt.unsqueeze(1)), dim=1)
    return ys
""",
    },
    "test_sample_next_token": {
        "sort_based_top_k_hf_top_p": """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    z = logits.clone() / temperature
    if top_k is not None:
        kth = torch.sort(z, dim=-1, descending=True).values[:, min(top_k, z.size(-1)) - 1]
        z[z < kth[:, None]] = float("-inf")
    if top_p is not None:
        sorted_z, idx = torch.sort(z, dim=-1)  # ascending, as in Hugging Face
        cum = torch.softmax(sorted_z, dim=-1).cumsum(dim=-1)
        remove_sorted = cum <= 1 - top_p
        remove_sorted[:, -1] = False
        remove = remove_sorted.scatter(1, idx, remove_sorted)
        z = z.masked_fill(remove, float("-inf"))
    return torch.multinomial(torch.softmax(z, dim=-1), num_samples=1, generator=generator)[:, 0]
""",
        "probabilities_and_shifted_mask": """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    z = logits.double() / temperature
    p = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    p = p / p.sum(dim=-1, keepdim=True)
    if top_k is not None:
        vals, idx = p.topk(min(top_k, p.size(-1)), dim=-1)
        p = torch.zeros_like(p).scatter(-1, idx, vals)
        p = p / p.sum(-1, keepdim=True)
    if top_p is not None:
        sp, si = p.sort(dim=-1, descending=True)
        remove = sp.cumsum(-1) >= top_p
        remove[:, 1:] = remove[:, :-1].clone()
        remove[:, 0] = False
        sp = sp.masked_fill(remove, 0.0)
        p = torch.empty_like(p).scatter_(-1, si, sp)
        p = p / p.sum(-1, keepdim=True)
    return torch.multinomial(p, 1, generator=generator).view(-1)
""",
        # karpathy/nanoGPT, model.py, GPT.generate: temperature then top-k (in place on the
        # scaled copy); the top-p of Hugging Face's top_k_top_p_filtering (descending sort,
        # cumsum > p shifted right so the crossing token stays), batched with scatter
        "nanogpt_top_k_hf_top_p": """
import torch.nn.functional as F
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    logits = logits / temperature
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float('Inf')
    if top_p is not None:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits = logits.masked_fill(indices_to_remove, -float('Inf'))
    probs = F.softmax(logits, dim=-1)
    idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
    return idx_next.squeeze(-1)
""",
        # huggingface/transformers, src/transformers/generation/logits_process.py:
        # TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper (ascending sort, remove
        # cumulative <= 1 - top_p, keep the last), in that order, as sample() applies them
        "hugging_face_logits_warpers": """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    filter_value = -float("Inf")
    scores = logits / temperature
    if top_k is not None:
        top_k = min(top_k, scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(indices_to_remove, filter_value)
    if top_p is not None:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
        sorted_indices_to_remove[..., -1:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        scores = scores.masked_fill(indices_to_remove, filter_value)
    probs = torch.nn.functional.softmax(scores, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
""",
        "warns_and_gathers": """
import warnings
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    warnings.warn("sampling is random; pass a generator for reproducible results")
    z = logits / temperature
    sz, order = torch.sort(z, dim=-1, descending=True)
    keep = torch.ones_like(sz, dtype=torch.bool)
    if top_k is not None:
        keep[:, top_k:] = False
    sz = sz.masked_fill(~keep, float("-inf"))
    if top_p is not None:
        ps = torch.softmax(sz, dim=-1)
        keep = keep & ((ps.cumsum(-1) - ps) < top_p)
        sz = sz.masked_fill(~keep, float("-inf"))
    choice = torch.multinomial(torch.softmax(sz, dim=-1), 1, generator=generator)
    return order.gather(-1, choice).squeeze(-1)
""",
    },
    "test_beam_search": {
        "tensor_topk": """
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=1.0):
    memory = model.encode(src)
    live = torch.full((1, 1), bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(1, dtype=torch.float64, device=src.device)
    done = []
    while len(live) and live.size(1) < max_len:
        out = model.decode(live, memory, causal_mask(live.size(1), device=src.device))  # (1, s, d) broadcasts
        total = scores[:, None] + torch.log_softmax(out[:, -1].double(), -1)
        V = total.size(1)
        val, idx = total.view(-1).topk(min(beam_size, total.numel()))
        ext = torch.cat([live[idx // V], (idx % V)[:, None]], 1)
        ends = ext[:, -1] == eos_id
        done += list(zip(val[ends].tolist(), ext[ends]))
        live, scores = ext[~ends], val[~ends]
    pool = done + list(zip(scores.tolist(), live))
    return max(pool, key=lambda p: p[0] / (p[1].numel() - 1) ** length_penalty)[1]
""",
        # every hypothesis decoded alone (batch of one), candidates kept with heapq.nlargest
        "one_hypothesis_at_a_time_heapq": """
import heapq
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=1.0):
    memory = model.encode(src)
    beam, done = [(0.0, (bos_id,))], []
    while beam and len(beam[0][1]) < max_len:
        pool = []
        for score, seq in beam:
            ys = torch.tensor([seq], dtype=torch.long, device=src.device)
            logits = model.decode(ys, memory, causal_mask(len(seq), device=src.device))
            logp = torch.log_softmax(logits[0, -1].double(), dim=-1).tolist()
            pool += [(score + lp, seq + (tok,)) for tok, lp in enumerate(logp)]
        best = heapq.nlargest(beam_size, pool, key=lambda c: c[0])
        done += [c for c in best if c[1][-1] == eos_id]
        beam = [c for c in best if c[1][-1] != eos_id]
    winner = max(done + beam, key=lambda c: c[0] / (len(c[1]) - 1) ** length_penalty)
    return torch.tensor(winner[1], dtype=torch.long, device=src.device)
""",
        "per_row_topk_then_merge_with_warning": """
import warnings
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=1.0):
    warnings.warn("beam search decodes one sentence at a time")
    memory = model.encode(src)
    live, finished = [([bos_id], 0.0)], []
    for L in range(1, max_len):
        if not live:
            break
        ys = torch.tensor([h for h, _ in live], device=src.device)
        lp = torch.log_softmax(model.decode(ys, memory.repeat(len(live), 1, 1), causal_mask(L, device=src.device))[:, -1], -1)
        pool = []
        for (h, s), row in zip(live, lp.double().cpu()):
            v, i = row.topk(min(beam_size, row.numel()))  # a row's best k suffice for the global best k
            pool += [(h + [int(t)], s + float(x)) for x, t in zip(v, i)]
        pool.sort(key=lambda p: -p[1])
        pool = pool[:beam_size]
        finished += [p for p in pool if p[0][-1] == eos_id]
        live = [p for p in pool if p[0][-1] != eos_id]
    best = max(finished + live, key=lambda p: p[1] / (len(p[0]) - 1) ** length_penalty)
    return torch.tensor(best[0], device=src.device)
""",
    },
}


# Buggy variants whose outputs are right for every input on the CPU: the bug shows on another
# device, in the gradients or on a non-contiguous view, which the hidden checks try and the
# integrity audit (outputs on fresh inputs) has no reason to.
RIGHT_ON_THE_CPU = {
    "test_greedy_decode": {"ys_made_on_the_cpu", "causal_mask_made_on_the_cpu", "finished_flags_on_the_cpu"},
    "test_sample_next_token": {
        "draws_on_the_cpu",
        "unsorts_into_a_cpu_tensor",
        "keeps_the_first_with_a_cpu_arange",
    },
    "test_beam_search": {"hypotheses_made_on_the_cpu", "causal_mask_made_on_the_cpu", "returns_a_cpu_tensor"},
}
