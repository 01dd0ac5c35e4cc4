"""Hidden checks for 03_attention: the cases that catch the common mistakes."""

from __future__ import annotations

import torch

from course_grading.reference import attention as ref
from course_utils.checks import attention as visible
from course_utils.checks.attention import qkv, unpack
from course_utils.checks.kit import Check, generator, torch_equal

from ._common import hidden_check, leaves_input
from ._device import second_devices

ASSIGNMENT = "03_attention"
_REFERENCE = [
    "course_grading.reference.attention.softmax",
    "course_grading.reference.attention.simple_self_attention",
    "course_grading.reference.attention.scaled_dot_product_attention",
    "course_grading.reference.attention.causal_mask",
]
# float64: what these checks catch is a float32 result (the dtype) and a wrong formula (off by
# 1e-2 and more). Correct code may round to float32 on the way and still return float64: a
# constant built in float32 (√d_k as a float32 tensor), a softmax upcast to float32 and cast
# back as Hugging Face's eager attention does; that moves the values by up to ~2e-7 (measured on
# the variants in tests/variants/03_attention.py), so the tolerance sits well above that.
ATOL64, RTOL64 = 1e-6, 1e-6


# the checks of the attention functions
_attention = hidden_check(visible, visible.ATTENTION_BUILTINS + _REFERENCE, visible.ATTENTION_OPS)


@hidden_check(visible, visible.SOFTMAX_BUILTINS + _REFERENCE, visible.SOFTMAX_OPS)
def check_softmax(c: Check, softmax) -> None:
    g = generator(30)
    x3 = torch.randn(2, 3, 4, generator=g) * 3
    for dim in (0, 1, -1):
        c.close(
            c.call(softmax, x3, dim=dim),
            ref.softmax(x3, dim=dim),
            f"wrong values with dim={dim}: sum and take the max over `dim`, the argument, not a fixed axis.",
        )
    c.ok("respects the dim argument on a 3-D tensor")
    masked = torch.tensor([[0.5, float("-inf"), 2.0, float("-inf")]])
    c.close(
        c.call(softmax, masked),
        ref.softmax(masked),
        "a logit of -inf (a masked position) should get probability exactly 0.",
        passed="-inf logits get probability 0",
    )
    small = torch.tensor([[-1e4, -1e4 + 2.0, -1e4 + 1.0]])
    c.close(
        c.call(softmax, small),
        ref.softmax(small),
        "logits of -1e4 underflow to 0/0 = NaN without the max trick.",
        atol=1e-3,
        passed="stable for very negative logits",
    )
    apart = torch.tensor([[1e4, 1e4 - 1.0, 1e4 - 2.0], [-1e4, -1e4 + 1.0, -1e4 + 2.0]])
    for dim, x_ in ((-1, apart), (0, apart.T.contiguous())):
        c.close(
            c.call(softmax, x_, dim=dim),
            ref.softmax(x_, dim=dim),
            "rows whose scores sit far apart (one near 1e4, one near -1e4) come out as "
            "NaN or zeros: each slice along `dim` needs its own maximum, not one "
            "maximum for the whole tensor.",
            atol=1e-3,
        )
    c.ok("each row shifted by its own maximum")
    x64 = torch.randn(3, 5, generator=g, dtype=torch.float64)
    out64 = c.call(softmax, x64)
    c.that(
        out64.dtype == torch.float64,
        "float64 input should give float64 output: don't create tensors with a fixed dtype.",
        "keeps float64",
    )
    c.close(out64, ref.softmax(x64), "wrong values in float64.", atol=ATOL64, rtol=RTOL64)
    fresh = torch.randn(3, 4, generator=g) + 5.0  # a tensor no earlier call has touched
    wrong = "softmax modified its input in place (e.g. x -= ...): compute into a new tensor."
    leaves_input(c, softmax, fresh, wrong=wrong, passed="leaves the input unchanged")
    # a transposed view (what scores.transpose(...) gives: .view() on it raises), through
    # which gradients must flow (attention is trained through this softmax)
    xg = x3.clone().requires_grad_(True)
    out = c.call(softmax, xg.transpose(1, 2))
    c.close(
        out,
        ref.softmax(x3.transpose(1, 2)),
        "wrong values for a non-contiguous input (a transposed view).",
        passed="non-contiguous input",
    )
    c.that(
        out.requires_grad,
        "no gradient flows back through softmax: use tensor operations "
        "only (no .detach(), .numpy() or .item()).",
    )
    mix = torch.randn(out.shape, generator=g)
    (out * mix).sum().backward()
    xr = x3.clone().requires_grad_(True)
    (ref.softmax(xr.transpose(1, 2)) * mix).sum().backward()
    c.close(
        xg.grad, xr.grad, "the gradient through softmax is wrong.", atol=1e-5, passed="gradients flow through"
    )
    # on a second device: anything made inside without device= fails there, as on a GPU
    x_inf = x3.clone()
    x_inf[0, :2, 1] = float("-inf")
    for dev in second_devices():
        c.close(
            dev.call(c, softmax, dev.tensor(x_inf), dim=1),
            ref.softmax(x_inf, dim=1),
            f"wrong values on {dev} (dim=1, some logits -inf).",
            atol=1e-5,
            passed=f"runs on {dev}",
        )


@_attention
def check_simple_self_attention(c: Check, simple_self_attention) -> None:
    Xw = torch.randn(5, 3, generator=generator(31)) * 2
    c.close(
        c.call(simple_self_attention, Xw),
        ref.simple_self_attention(Xw),
        "wrong values: don't scale the scores here, and return the weighted values, not the weights.",
        passed="a second example",
    )
    # a float64 batch, on a second device (a GPU would fail on a tensor made on the CPU)
    Xb = torch.randn(2, 4, 3, generator=generator(33), dtype=torch.float64)
    for dev in second_devices():
        out = dev.call(c, simple_self_attention, dev.tensor(Xb))
        c.that(
            out.dtype == torch.float64,
            "float64 input should give float64 output: don't create tensors with a fixed dtype.",
        )
        c.close(
            out,
            ref.simple_self_attention(Xb),
            f"wrong values for a batch in float64 (on {dev}).",
            atol=ATOL64,
            rtol=RTOL64,
            passed=f"batched, float64, on {dev}",
        )


@_attention
def check_scaled_dot_product_attention(c: Check, scaled_dot_product_attention) -> None:
    g = generator(32)
    Q, K, V = qkv(g, 2, q=5, k=7, d_k=4, d_v=9)
    out, w = unpack(c, c.call(scaled_dot_product_attention, Q, K, V))
    ro, rw = ref.scaled_dot_product_attention(Q, K, V)
    c.close(
        w,
        rw,
        "with d_k = 4 and d_v = 9, scale by √d_k (from Q or K), not √d_v; and q ≠ k lengths must work.",
        passed="d_k ≠ d_v and q ≠ k, batched",
    )
    c.close(out, ro, "output wrong when d_k ≠ d_v.")
    Q, K, V = qkv(g, 2, 3, q=4, k=4, d_k=6, d_v=6)
    mask = torch.rand(1, 1, 4, 4, generator=g) > 0.4
    mask[..., 0] = True  # every row may attend somewhere
    out, w = unpack(c, c.call(scaled_dot_product_attention, Q, K, V, mask))
    ro, rw = ref.scaled_dot_product_attention(Q, K, V, mask)
    c.close(
        w,
        rw,
        "a (1, 1, q, k) mask should broadcast over the leading dims; True means 'may attend'.",
        passed="mask broadcasts over batch and heads",
    )
    c.close(out, ro, "output wrong with a broadcast mask.")
    keep = torch.tensor([True, False, True, True])
    Q, K, V = qkv(g, q=2, k=4, d_k=3, d_v=3)
    out, w = unpack(c, c.call(scaled_dot_product_attention, Q, K, V, keep))
    c.close(
        w,
        ref.scaled_dot_product_attention(Q, K, V, keep)[1],
        "a (k,) key mask should broadcast over queries.",
        passed="key-only mask",
    )
    Q, K, V = qkv(g, q=3, k=3, d_k=5, d_v=2)
    big = (Q * 3e3, K * 3e3, V)
    out, w = unpack(c, c.call(scaled_dot_product_attention, *big))
    c.close(
        w,
        ref.scaled_dot_product_attention(*big)[1],
        "huge scores overflow: the softmax must subtract the max (is yours stable?).",
        passed="stable with huge scores",
    )
    # d_k = 6: √6 is not a float32 number, so a float32 constant in the scale shows (and passes)
    Q, K, V = qkv(g, 2, q=3, k=5, d_k=6, d_v=4, dtype=torch.float64)
    out, w = unpack(c, c.call(scaled_dot_product_attention, Q, K, V))
    c.that(
        out.dtype == torch.float64 and w.dtype == torch.float64,
        f"float64 inputs should give float64 outputs and weights, got {out.dtype} and "
        f"{w.dtype}: don't create tensors with a fixed dtype.",
    )
    ro, rw = ref.scaled_dot_product_attention(Q, K, V)
    c.close(w, rw, "wrong weights in float64.", atol=ATOL64, rtol=RTOL64)
    c.close(out, ro, "wrong values in float64.", atol=ATOL64, rtol=RTOL64, passed="float64")
    # gradients reach Q, K and V (attention is trained through this function)
    Qg, Kg, Vg = (t.clone().requires_grad_(True) for t in qkv(g, 2, q=3, k=4, d_k=6, d_v=5))
    out, w = unpack(c, c.call(scaled_dot_product_attention, Qg, Kg, Vg, ref.causal_mask(4)[:3]))
    c.that(
        out.requires_grad,
        "no gradient flows back through the output: use tensor "
        "operations only (no torch.no_grad(), .detach() or .item()).",
    )
    mix = torch.randn(out.shape, generator=generator(34), dtype=out.dtype)
    (out * mix).sum().backward()
    Qr, Kr, Vr = (t.detach().clone().requires_grad_(True) for t in (Qg, Kg, Vg))
    (ref.scaled_dot_product_attention(Qr, Kr, Vr, ref.causal_mask(4)[:3])[0] * mix).sum().backward()
    for name, mine, theirs in (("Q", Qg, Qr), ("K", Kg, Kr), ("V", Vg, Vr)):
        c.that(
            mine.grad is not None,
            f"no gradient reaches {name}: use tensor operations "
            "only (no torch.no_grad(), .detach() or .item() on the way).",
        )
        c.close(
            mine.grad, theirs.grad, f"the gradient with respect to {name} is wrong.", atol=1e-5, rtol=1e-4
        )
    c.ok("gradients reach Q, K and V")
    # on a second device: a mask, a scale or a fill value made inside without device=
    # stays on the CPU and fails there, as on a GPU (float64, d_k = 6, a causal mask)
    for dev in second_devices():
        mask = ref.causal_mask(5)[:3]
        out, w = unpack(c, dev.call(c, scaled_dot_product_attention, *dev.tensor((Q, K, V, mask))))
        ro, rw = ref.scaled_dot_product_attention(Q, K, V, mask)
        c.close(w, rw, f"wrong weights on {dev}.", atol=ATOL64, rtol=RTOL64)
        c.close(out, ro, f"wrong output on {dev}.", atol=ATOL64, rtol=RTOL64, passed=f"runs on {dev}")


@hidden_check(visible, _REFERENCE)
def check_causal_mask(c: Check, causal_mask) -> None:
    for n in (1, 2, 7):
        c.that(torch_equal(c.call(causal_mask, n), ref.causal_mask(n)), f"wrong for size {n}.")
    c.ok("sizes 1, 2 and 7")
    meta = c.call(causal_mask, 3, device=torch.device("meta"))
    c.that(
        meta.device.type == "meta",
        "the mask should be created on the `device` given (pass device= when you create the tensor).",
        "honours the device argument",
    )
    c.that(c.call(causal_mask, 3, device="cpu").device.type == "cpu", "device='cpu' should give a CPU mask.")
    for dev in second_devices():
        c.that(
            torch_equal(dev.call(c, causal_mask, 5, device=dev.device), ref.causal_mask(5)),
            f"wrong mask on {dev}.",
            f"runs on {dev}",
        )
