"""Other ways to write the H3 block, for robust.py's `implementations` item.

A user's copy of the block is rarely this project's `h3_vae.Block` line for
line: the norm written out by hand or Llama's way, q, k and v as three
projections, the rotary embedding interleaved, the residual as `addcmul` or
in place, the gate as two GEMMs or GELU, another attention backend.  Each
entry of implementations() is one such block: the reference forward with one
part written another way.  Whatever the shim makes of it (fused where its
planners recognise every fact they rely on, passed through elsewhere), the
bits must be those of the same program without the shim.

run(names) decodes, in both of h3_vae's modes, first the reference at the
shared shape (the committed signature's 1797 tokens; with none loaded, its
signature is learned there), then each named implementation at a shape of its
own (learned on its own), then each at the shared shape (the reference's
signature in sight of a look-alike).  It returns {"NAME/MODE/PASS": sha256}
and the token count of each shape.

GROUPS is plain data, read by robust.py's parent process without PyTorch;
PyTorch and h3_vae are imported by run().
"""
import os
import sys

# The implementations of each of the item's processes (a process learns at most
# 24 groups: README, "Limits").
GROUPS = (
    ("parts_as_reference", "norm_by_hand", "norm_llama_style", "norm_functional", "norm_of_half",
     "qkv_three_gemms", "qk_norm_weighted", "qk_norm_eps_1e-6"),
    ("qk_norm_by_hand", "rope_interleaved", "rope_in_fp32", "sdpa_scale_given", "sdpa_flash", "sdpa_math",
     "no_nan_to_num", "residual_scale_first"),
    ("residual_addcmul", "residual_in_place", "ff_value_first", "ff_two_gemms", "ff_gelu_tanh",
     "ff_silu_in_place", "residual_stream_fp16"),
)
SHARED = (1, 24, 7, 16, 16)  # 1797 tokens: the committed signature's


def own_shape(i):
    """Implementation i's own latent shape: 16 x (17 + i) tokens and the 5 extra ones."""
    return (1, 24, 1, 16, 17 + i)


def implementations():
    """{name: () -> a Block.forward written that way}, in GROUPS' order."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import h3_vae
    W, H, D, R, E, HALF, FF = (h3_vae.WIDTH, h3_vae.HEADS, h3_vae.HEAD_DIM, h3_vae.ROPE_DIM, h3_vae.EPS,
                               h3_vae.HALF, h3_vae.FF_INNER)

    def rms(x, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    def rope_interleaved(x, cos, sin):
        """Rotary embedding on pairs (0,1), (2,3), ... of dims 0..47 instead of the two halves."""
        xr, xp = x[..., :R], x[..., R:]
        rot = torch.stack([-xr[..., 1::2], xr[..., 0::2]], dim=-1).flatten(-2)
        return torch.cat([xr * cos + rot * sin, xp], dim=-1)

    def separate_qkv(blk, n, b, s):
        """q, k and v as three projections of the fused weight's rows (per head: q, k, v of 64)."""
        w = blk.attn.to_qkv.weight.view(H, 3, D, W)
        bias = blk.attn.to_qkv.bias.view(H, 3, D)
        return tuple(F.linear(n, w[:, i].reshape(H * D, W), bias[:, i].reshape(H * D)).view(b, s, H, D)
                     for i in range(3))

    def ff_two_gemms(blk, n):
        """The gate and the value as two GEMMs on the halves of w1."""
        w, bias = blk.ff.w1.weight, blk.ff.w1.bias
        return blk.ff.w2(F.silu(F.linear(n, w[:FF], bias[:FF])) * F.linear(n, w[FF:], bias[FF:]))

    def ff(act, value_first=False):
        def run_ff(blk, n):
            g, x = blk.ff.w1(n).chunk(2, dim=-1)
            return blk.ff.w2(x * act(g) if value_first else act(g) * x)
        return run_ff

    def sdpa(backend=None, **kw):
        def attn(q, k, v):
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, **kw)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, **kw)
        return attn

    q_weight = torch.linspace(0.5, 1.5, D, device="cuda")  # made outside any grad mode

    def qk_norm_weighted(x):
        """q and k norms with a weight (a learnable one in some copies of the block)."""
        return F.rms_norm(x.float(), (D,), q_weight, eps=E).to(HALF)

    # The reference's parts, in the order Block.forward makes its calls.
    parts = dict(
        stream=lambda h: h,
        norm=lambda m, h: m(h.float()).to(h.dtype),
        qkv=lambda blk, n, b, s: blk.attn.to_qkv(n).view(b, s, H, 3 * D).chunk(3, dim=-1),
        qknorm=lambda x: F.rms_norm(x.float(), (D,), eps=E).to(HALF),
        rope=h3_vae.apply_rope,
        attn=sdpa(),
        post=lambda o, b, s: o.transpose(1, 2).nan_to_num(0.0).reshape(b, s, W),
        residual=lambda h, y, scale: h + y * scale,
        ff=ff(F.silu),
    )

    def forward_of(**changed):
        p = dict(parts, **changed)

        def forward(self, h, cos, sin):
            h = p["stream"](h)
            b, s, _ = h.shape
            n = p["norm"](self.norm1, h)
            q, k, v = p["qkv"](self, n, b, s)
            q, k = p["qknorm"](q), p["qknorm"](k)
            q, k = p["rope"](q, cos, sin), p["rope"](k, cos, sin)
            o = p["post"](p["attn"](q, k, v), b, s)
            h = p["residual"](h, self.attn.to_out(o), self.scale1)
            n = p["norm"](self.norm2, h)
            return p["residual"](h, p["ff"](self, n), self.scale2)
        return forward

    table = {
        "parts_as_reference": {},
        "norm_by_hand": dict(norm=lambda m, h: (rms(h.float(), m.eps) * m.weight).to(h.dtype)),
        "norm_llama_style": dict(norm=lambda m, h: m.weight * rms(h.float(), m.eps).to(h.dtype)),
        "norm_functional": dict(norm=lambda m, h: F.rms_norm(h.float(), (W,), m.weight, m.eps).to(h.dtype)),
        "norm_of_half": dict(norm=lambda m, h: m(h.half()).to(h.dtype)),
        "qkv_three_gemms": dict(qkv=separate_qkv),
        "qk_norm_weighted": dict(qknorm=qk_norm_weighted),
        "qk_norm_eps_1e-6": dict(qknorm=lambda x: F.rms_norm(x.float(), (D,), eps=1e-6).to(HALF)),
        "qk_norm_by_hand": dict(qknorm=lambda x: rms(x.float(), E).to(HALF)),
        "rope_interleaved": dict(rope=rope_interleaved),
        "rope_in_fp32": dict(rope=lambda x, c, s: h3_vae.apply_rope(x.float(), c.float(), s.float()).to(HALF)),
        "sdpa_scale_given": dict(attn=sdpa(scale=D ** -0.5)),
        "sdpa_flash": dict(attn=sdpa(SDPBackend.FLASH_ATTENTION)),
        "sdpa_math": dict(attn=sdpa(SDPBackend.MATH)),
        "no_nan_to_num": dict(post=lambda o, b, s: o.transpose(1, 2).reshape(b, s, W)),
        "residual_scale_first": dict(residual=lambda h, y, scale: h + scale * y),
        "residual_addcmul": dict(residual=lambda h, y, scale: torch.addcmul(h, y, scale)),
        "residual_in_place": dict(residual=lambda h, y, scale: h.add_(y * scale)),
        "ff_value_first": dict(ff=ff(F.silu, value_first=True)),
        "ff_two_gemms": dict(ff=ff_two_gemms),
        "ff_gelu_tanh": dict(ff=ff(lambda g: F.gelu(g, approximate="tanh"))),
        "ff_silu_in_place": dict(ff=ff(lambda g: F.silu(g, inplace=True))),
        "residual_stream_fp16": dict(stream=lambda h: h.half()),
    }
    assert list(table) == [n for g in GROUPS for n in g], "GROUPS and the table must name the same blocks"
    return {name: (lambda c=changed: forward_of(**c)) for name, changed in table.items()}


def run(names, sha, blocks=6, forwards=3):
    """({"NAME/MODE/PASS": sha256 or what was raised}, {NAME: tokens}) for the named implementations."""
    import torch
    table = implementations()  # puts scripts/ on the path

    import h3_vae
    dev = torch.device("cuda")
    model = h3_vae.build_model(blocks, 0, dev)
    tokens = lambda shape: shape[2] * shape[3] * shape[4] + h3_vae.EXTRA_TOKENS  # noqa: E731
    res, shapes = {}, {"(every block at the shared shape)": tokens(SHARED)}

    def decode(name, forward, shape, seed, label):
        for blk in model.decoder.blocks:
            blk.forward = forward.__get__(blk)
        x = h3_vae.make_latent(shape, seed, dev)
        for mode in h3_vae.MODES:
            model.requires_grad_(mode == "serving")  # serving: parameters as loaded, autocast caches casts
            try:
                with h3_vae.decode_context(mode, dev):  # one request: `forwards` ViT calls in one region
                    ys = [model(x) for _ in range(forwards)]
                res[f"{name}/{mode}/{label}"] = sha(torch.stack(ys))
            except Exception as e:  # the model itself rejects it: the same with and without the shim
                res[f"{name}/{mode}/{label}"] = f"raised {type(e).__name__}: {str(e)[:120]}"
            torch.cuda.synchronize()

    decode("reference", h3_vae.Block.forward, SHARED, 1, "shared_shape")
    index = {n: i for i, n in enumerate(table)}
    for name in names:
        shapes[name] = tokens(own_shape(index[name]))
        decode(name, table[name](), own_shape(index[name]), 2 + index[name], "own_shape")
    for name in names:
        decode(name, table[name](), SHARED, 1, "shared_shape")
    decode("reference_again", h3_vae.Block.forward, SHARED, 1, "shared_shape")
    return res, shapes
