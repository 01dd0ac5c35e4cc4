"""Variants for 08_generation: BUGGY must fail their grade cell, CORRECT must pass it.

Each source runs after the notebook's setup and solution cells (torch and causal_mask are
there), replacing one function.
"""

# -- greedy_decode -----------------------------------------------------------------------------
_GREEDY = '''
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
'''
_G = dict(encode_mask="src_mask", decode_mask="src_mask", position="-1",
          loop="ys.size(1) < max_len and not done.all()",
          pad="next_id = torch.where(done, torch.full_like(next_id, eos_id), next_id)")


def _greedy(**changes) -> str:
    return _GREEDY.format(**{**_G, **changes})


# -- sample_next_token -------------------------------------------------------------------------
_SAMPLE = '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    z = {scale}
    if top_k is not None:
        k = min(top_k, z.size(-1))
        kth = torch.topk(z, k, dim=-1, largest={largest}).values[:, -1:]
        z = z.masked_fill({kmask}, float("-inf"))
    if top_p is not None:
        probs, order = torch.sort(torch.softmax(z, dim=-1), dim=-1, descending=True)
        {drop_sorted}
        drop = {unsort}
        z = z.masked_fill(drop, float("-inf"))
    probs = torch.softmax(z, dim=-1)
    return {draw}
'''
_S = dict(scale="logits / temperature", largest="True", kmask="z < kth",
          drop_sorted="drop_sorted = torch.cumsum(probs, dim=-1) - probs >= top_p",
          unsort="torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)",
          draw="torch.multinomial(probs, 1, generator=generator).squeeze(-1)")


def _sample(**changes) -> str:
    return _SAMPLE.format(**{**_S, **changes})


# -- beam_search -------------------------------------------------------------------------------
_BEAM = '''
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
'''
_B = dict(extend="s + float(logp[i, v])",
          select="""cands.sort(key=lambda c: c[0], reverse=True)
        best = cands[:beam_size]
        finished += [c for c in best if c[1][-1] == eos_id]
        live = [c for c in best if c[1][-1] != eos_id]""",
          norm="c[0] / (len(c[1]) - 1) ** length_penalty")


def _beam(**changes) -> str:
    return _BEAM.format(**{**_B, **changes})


BUGGY = {
    "test_greedy_decode": {
        "first_position": _greedy(position="0"),
        "no_stop_at_eos": _greedy(loop="ys.size(1) < max_len"),
        "no_eos_padding": _greedy(pad="pass"),
        "stops_when_any_row_done": _greedy(loop="ys.size(1) < max_len and not done.any()"),
        "max_len_new_tokens": _greedy(loop="ys.size(1) <= max_len and not done.all()"),
        "ignores_src_mask": _greedy(encode_mask="None", decode_mask="None"),
        "src_mask_only_to_encode": _greedy(decode_mask="None"),
        "not_implemented": '''
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    raise NotImplementedError()
''',
        "calls_reference": '''
from course_grading.reference.generation import greedy_decode as _ref_greedy
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None):
    return _ref_greedy(model, src, max_len, bos_id, eos_id, src_mask)
''',
    },
    "test_sample_next_token": {
        "temperature_multiplied": _sample(scale="logits * temperature"),
        "top_k_keeps_lowest": _sample(largest="False", kmask="z > kth"),
        "top_p_drops_crossing_token": _sample(
            drop_sorted="drop_sorted = torch.cumsum(probs, dim=-1) > top_p\n"
                        "        drop_sorted[:, 0] = False"),
        "top_p_unsorted": _sample(
            drop_sorted="drop_sorted = torch.cumsum(torch.softmax(z, -1), dim=-1) - "
                        "torch.softmax(z, -1) >= top_p",
            unsort="drop_sorted"),
        "top_p_mask_not_unsorted": _sample(unsort="drop_sorted"),
        "argmax_not_sampling": _sample(draw="probs.argmax(dim=-1)"),
        "ignores_generator": _sample(draw="torch.multinomial(probs, 1).squeeze(-1)"),
        "no_squeeze": _sample(draw="torch.multinomial(probs, 1, generator=generator)"),
        "in_place": _sample(scale="logits.div_(temperature)"),
    },
    "test_beam_search": {
        "not_length_normalised": _beam(norm="c[0]"),
        "normalised_by_length_with_bos": _beam(norm="c[0] / len(c[1]) ** length_penalty"),
        "last_token_score_only": _beam(extend="float(logp[i, v])"),
        "finished_stay_in_beam": _beam(select="""cands += [c for c in finished]
        cands.sort(key=lambda c: c[0], reverse=True)
        best = cands[:beam_size]
        finished = [c for c in best if c[1][-1] == eos_id]
        live = [c for c in best if c[1][-1] != eos_id]"""),
        "eos_is_an_ordinary_token": _beam(select="""cands.sort(key=lambda c: c[0], reverse=True)
        live = cands[:beam_size]"""),
        "beam_per_hypothesis": _beam(select="""best = []
        for i in range(len(live)):
            mine = cands[i * logp.size(-1):(i + 1) * logp.size(-1)]
            best += sorted(mine, key=lambda c: -c[0])[:beam_size]
        finished += [c for c in best if c[1][-1] == eos_id]
        live = [c for c in best if c[1][-1] != eos_id]"""),
    },
}

CORRECT = {
    "test_greedy_decode": {
        "preallocated": '''
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
''',
        "python_lists_and_warning": '''
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
''',
        "no_mask_on_last_position": '''
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
''',
    },
    "test_sample_next_token": {
        "sort_based_top_k_hf_top_p": '''
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
''',
        "probabilities_and_shifted_mask": '''
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
''',
        "warns_and_gathers": '''
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
''',
    },
    "test_beam_search": {
        "tensor_topk": '''
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
''',
        "per_row_topk_then_merge_with_warning": '''
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
''',
    },
}
