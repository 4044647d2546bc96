"""The MiniMax-H3 video-VAE decoder in plain PyTorch, as DESIGN.md section 2 describes it.

This is the reference workload of h3shim: the shim must see exactly the call
stream that the real decoder produces, so the code below follows the published
block line by line and must not be "optimised". Every tensor operation in
Block.forward is one of the 42 calls DESIGN.md lists (4 cublasLtMatmul,
1 cudnnBackendExecute, 37 kernel launches); the comments give the call numbers.

Parameters are FP32. A decode runs in one of two modes (MODES, decode_context):
"serving", as the H3 serving pipeline runs it (vLLM-Omni's
MiniMaxH3Pipeline.forward): under torch.no_grad(), one
torch.autocast(device, dtype=torch.float16) region per request with
autocast's cast cache on (its default), the parameters left as loaded
(requires_grad=True, nn.Module's default), so a request casts each weight to
FP16 once and its later tiles reuse the cached casts; and "inference", this
project's earlier way: torch.inference_mode() and the same autocast, the
parameters requires_grad_(False) (autocast caches no cast then, so every ViT
call casts every weight again). build_model's requires_grad picks the
parameters' flag; library functions default to "inference". The
residual stream h is FP32. On the CPU (development only) autocast uses float16
as well, which needs a PyTorch with CPU float16 autocast (2.4 or later); CPU
results are not comparable with GPU results.

Parameter names (the checkpoint layout that --weights expects; N = 0..35):

  post_quant_conv.weight            [24, 24, 1, 1, 1]
  post_quant_conv.bias              [24]
  decoder.x_embedder.weight         [2048, 24]
  decoder.x_embedder.bias           [2048]
  decoder.register_tokens           [1, 4, 2048]
  decoder.blocks.N.norm1.weight     [2048]
  decoder.blocks.N.attn.to_qkv.weight   [6144, 2048]   rows per head h: q, k, v of 64 each (view (32, 192))
  decoder.blocks.N.attn.to_qkv.bias     [6144]
  decoder.blocks.N.attn.to_out.weight   [2048, 2048]
  decoder.blocks.N.attn.to_out.bias     [2048]
  decoder.blocks.N.scale1           [2048]
  decoder.blocks.N.norm2.weight     [2048]
  decoder.blocks.N.ff.w1.weight     [16384, 2048]      rows 0..8191 gate, 8192..16383 value
  decoder.blocks.N.ff.w1.bias       [16384]
  decoder.blocks.N.ff.w2.weight     [2048, 8192]
  decoder.blocks.N.ff.w2.bias       [2048]
  decoder.blocks.N.scale2           [2048]
  decoder.norm_out.weight           [2048]
  decoder.norm_out.bias             [2048]
  decoder.proj_out.weight           [3072, 2048]       output feature (c, f, y, x): 3 x 4 x 16 x 16
  decoder.proj_out.bias             [3072]

Synthetic weights come from a counter-based integer hash evaluated with
int64 tensor arithmetic, so the same seed gives bit-identical parameters on
any CPU or GPU (unlike torch.randn on CUDA, whose stream depends on the SM
count); they are scaled so that 36 blocks keep every FP16 activation far
below 65504 (check with serve.py --activation-stats).
"""

import contextlib
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import time
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from h3_tiling import (BLEND_FRAMES, CHUNK_OUT_FRAMES, EXTRA_TOKENS, FRAMES_PER_LATENT, KEEP_FRAMES,
                       LATENT_CHANNELS, PIXELS_PER_LATENT, ramp)

WIDTH = 2048
HEADS = 32
HEAD_DIM = 64
ROPE_DIM = 48
ROPE_THETA = 100.0
FF_INNER = 8192
REGISTERS = 4
EPS = 1e-5
OUT_CHANNELS = 3
PATCH_OUT = OUT_CHANNELS * FRAMES_PER_LATENT * PIXELS_PER_LATENT * PIXELS_PER_LATENT
HALF = torch.float16
MODES = ("serving", "inference")


class CheckpointError(Exception):
    """A --weights checkpoint cannot be used; the message says which tensor and why."""


def apply_rope(x, cos, sin):
    """NeoX half-split rotary embedding on dims 0..47 of x [B,S,H,64]; dims 48..63 pass through.

    Kernels, in order: Half mul (x*cos), neg, cat, Half mul (*sin), Half add, cat.
    """
    xr, xp = x[..., :ROPE_DIM], x[..., ROPE_DIM:]
    x1, x2 = xr[..., :ROPE_DIM // 2], xr[..., ROPE_DIM // 2:]
    return torch.cat([xr * cos + torch.cat([-x2, x1], dim=-1) * sin, xp], dim=-1)


class Attention(nn.Module):
    """Holds the attention projections; the computation is in Block.forward."""

    def __init__(self):
        super().__init__()
        self.to_qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.to_out = nn.Linear(WIDTH, WIDTH)


class FeedForward(nn.Module):
    """Holds the gated-SiLU projections; the computation is in Block.forward."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(WIDTH, 2 * FF_INNER)
        self.w2 = nn.Linear(FF_INNER, WIDTH)


class Block(nn.Module):
    """One H3 decoder block: width 2048, 32 heads of 64, FF inner 8192, no attention mask."""

    def __init__(self):
        super().__init__()
        self.norm1 = nn.RMSNorm(WIDTH, eps=EPS)
        self.attn = Attention()
        self.scale1 = nn.Parameter(torch.empty(WIDTH))
        self.norm2 = nn.RMSNorm(WIDTH, eps=EPS)
        self.ff = FeedForward()
        self.scale2 = nn.Parameter(torch.empty(WIDTH))

    def forward(self, h, cos, sin):
        b, s, _ = h.shape
        n = self.norm1(h.float()).to(h.dtype)                                         # 1
        q, k, v = self.attn.to_qkv(n).view(b, s, HEADS, 3 * HEAD_DIM).chunk(3, dim=-1)  # 2-5
        q = F.rms_norm(q.float(), (HEAD_DIM,), eps=EPS).to(HALF)                     # 6-8
        k = F.rms_norm(k.float(), (HEAD_DIM,), eps=EPS).to(HALF)                     # 9-11
        q = apply_rope(q, cos, sin)                                                  # 12-17
        k = apply_rope(k, cos, sin)                                                  # 18-23
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # 24
        o = o.transpose(1, 2).nan_to_num(0.0).reshape(b, s, WIDTH)                   # 25
        h = h + self.attn.to_out(o) * self.scale1                                    # 26-30
        n = self.norm2(h.float()).to(h.dtype)                                        # 31
        g, x = self.ff.w1(n).chunk(2, dim=-1)                                        # 32-35
        return h + self.ff.w2(F.silu(g) * x) * self.scale2                           # 36-42


class ViTDecoder(nn.Module):
    """Tokens in, pixels out: x_embedder, registers, RoPE, the blocks, LayerNorm, proj_out, unpack."""

    def __init__(self, blocks):
        super().__init__()
        self.x_embedder = nn.Linear(LATENT_CHANNELS, WIDTH)
        self.register_tokens = nn.Parameter(torch.empty(1, REGISTERS, WIDTH))
        self.register_buffer("zero_token", torch.zeros(1, 1, WIDTH), persistent=False)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))
        self.norm_out = nn.LayerNorm(WIDTH, eps=EPS)
        self.proj_out = nn.Linear(WIDTH, PATCH_OUT)
        self._rope = {}

    def rope_tables(self, b, t, hh, ww, device):
        """FP16 cos/sin tables [B,S,1,48] for a t x hh x ww token grid plus the 5 extra tokens.

        Coordinates are length-normalised (i / n along each axis, so every tile
        sees the same positions); each axis gets 8 frequencies
        theta**(j/8), j = 0..7, in turns per tile length, i.e. 16 of the 48
        rotary dims, NeoX layout (the 24 angles repeated). Register and zero
        tokens sit at the origin (cos 1, sin 0). Computed once per shape in
        float64 on the CPU, so the tables are the same on every device.
        """
        key = (b, t, hh, ww, str(device))
        if key not in self._rope:
            freqs = ROPE_THETA ** (torch.arange(8, dtype=torch.float64) / 8)
            axes = torch.meshgrid(*(torch.arange(n, dtype=torch.float64) / n for n in (t, hh, ww)), indexing="ij")
            angles = torch.cat([a.reshape(-1, 1) * freqs for a in axes], dim=1) * (2 * math.pi)
            angles = torch.cat([angles, torch.zeros(EXTRA_TOKENS, angles.shape[1], dtype=torch.float64)])
            angles = torch.cat([angles, angles], dim=1)[None, :, None, :].expand(b, -1, -1, -1)
            self._rope[key] = tuple(f(angles).to(HALF).contiguous().to(device) for f in (torch.cos, torch.sin))
        return self._rope[key]

    def run_blocks(self, h, cos, sin):
        for block in self.blocks:
            h = block(h, cos, sin)
        return h

    def forward(self, z):
        """z: post_quant_conv output [B,24,t,hh,ww]; returns FP32 pixels [B,3,4t,16hh,16ww]."""
        b, c, t, hh, ww = z.shape
        n = t * hh * ww
        tokens = z.permute(0, 2, 3, 4, 1).reshape(b, n, c)
        with torch.autocast(z.device.type, enabled=False):
            x = self.x_embedder(tokens.float())
        h = torch.cat([x, self.register_tokens.expand(b, -1, -1), self.zero_token.expand(b, -1, -1)], dim=1)
        cos, sin = self.rope_tables(b, t, hh, ww, z.device)
        h = self.norm_out(self.run_blocks(h, cos, sin))
        with torch.autocast(z.device.type, enabled=False):
            y = self.proj_out(h.float())[:, :n]
        p = PIXELS_PER_LATENT
        y = y.reshape(b, t, hh, ww, OUT_CHANNELS, FRAMES_PER_LATENT, p, p).permute(0, 4, 1, 5, 2, 6, 3, 7)
        return y.reshape(b, OUT_CHANNELS, t * FRAMES_PER_LATENT, hh * p, ww * p)


class H3VAEDecoder(nn.Module):
    """post_quant_conv + the ViT: one call decodes one latent tile (one "ViT call")."""

    def __init__(self, blocks=36):
        super().__init__()
        self.post_quant_conv = nn.Conv3d(LATENT_CHANNELS, LATENT_CHANNELS, 1)
        self.decoder = ViTDecoder(blocks)

    def forward(self, tile):
        return self.decoder(self.post_quant_conv(tile))


def hash_uniform(numel, key, device):
    """numel FP32 values, uniform on [-sqrt(3), sqrt(3)) (unit variance), from a 32-bit key.

    Two rounds of a 32-bit integer hash over the element index, computed in
    int64 with every product below 2**63, so CPU and GPU agree bit for bit.
    """
    def mix(x):
        x = ((x >> 16) ^ x) * 0x45D9F3B & 0xFFFFFFFF
        x = ((x >> 16) ^ x) * 0x45D9F3B & 0xFFFFFFFF
        return (x >> 16) ^ x

    x = mix(mix(torch.arange(numel, dtype=torch.int64, device=device)) ^ key)
    return ((x >> 8).to(torch.float32) * 2.0 ** -24 - 0.5) * (2 * math.sqrt(3))


def synthetic_value(name, shape, seed, device):
    """The synthetic FP32 tensor for parameter `name` (mean and spread chosen per kind)."""
    numel = math.prod(shape)
    key = zlib.crc32(f"h3vae:{seed}:{name}".encode())
    u = hash_uniform(numel, key, device).reshape(shape)
    if name.endswith(("norm1.weight", "norm2.weight", "norm_out.weight")):
        return u * 0.1 + 1.0
    if name.endswith(("scale1", "scale2")):
        return u * 0.02 + 0.1
    if name.endswith(".bias"):
        return u * 0.02
    if name.endswith("register_tokens"):
        return u
    gain = 0.5 if name.startswith("decoder.proj_out") else 1.0
    return u * (gain / math.sqrt(numel // shape[0]))


def make_latent(shape, seed, device):
    """A deterministic unit-variance FP32 latent of `shape` (same bits on every device)."""
    key = zlib.crc32(f"h3vae-latent:{seed}".encode())
    return hash_uniform(math.prod(shape), key, device).reshape(shape)


SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def _read_header(path):
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise CheckpointError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        size = struct.unpack("<Q", head)[0]
        try:
            header = json.loads(f.read(size))
        except ValueError as e:
            raise CheckpointError(f"{path}: not a safetensors file (bad JSON header: {e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (the header is not a JSON object)")
    header.pop("__metadata__", None)
    for name, info in header.items():
        try:
            ok = (isinstance(info["dtype"], str) and all(isinstance(n, int) for n in info["shape"])
                  and len(info["data_offsets"]) == 2)
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise CheckpointError(f"{path}: malformed header entry for tensor {name}")
    return 8 + size, header


class SafetensorsReader:
    """Reads tensors from the *.safetensors files of a checkpoint (a directory or one file).

    Uses the `safetensors` package when it is importable, and otherwise a
    small built-in reader of the same format (8-byte little-endian header
    length, JSON header, raw little-endian data), so PyTorch alone suffices.
    """

    def __init__(self, location, use_package=True):
        if os.path.isdir(location):
            files = sorted(os.path.join(location, f) for f in os.listdir(location) if f.endswith(".safetensors"))
        elif os.path.isfile(location):
            files = [location]
        else:
            raise CheckpointError(f"{location}: no such checkpoint file or directory")
        if not files:
            raise CheckpointError(f"{location}: directory contains no *.safetensors file")
        self.index = {}
        for path in files:
            base, header = _read_header(path)
            for name, info in header.items():
                if name in self.index:
                    raise CheckpointError(f"{name}: tensor appears in both {self.index[name][0]} and {path}")
                self.index[name] = (path, base, info)
        self.package = None
        if use_package:
            try:
                from safetensors import safe_open
                self.package = safe_open
            except ImportError:
                pass

    def shape(self, name):
        return tuple(self.index[name][2]["shape"])

    def get(self, name):
        path, base, info = self.index[name]
        if self.package is not None:
            try:
                with self.package(path, framework="pt") as f:
                    return f.get_tensor(name)
            except Exception as e:  # The package raises its own error types for malformed files.
                raise CheckpointError(f"{path}: {name}: {e}") from None
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        start, end = info["data_offsets"]
        with open(path, "rb") as f:
            f.seek(base + start)
            data = bytearray(f.read(end - start))
        if len(data) != end - start:
            raise CheckpointError(f"{name}: {path} is truncated")
        if sys.byteorder != "little":
            raise CheckpointError("the built-in safetensors reader needs a little-endian host")
        if not data:
            return torch.empty(info["shape"], dtype=dtype)
        return torch.frombuffer(data, dtype=dtype).reshape(info["shape"])


def write_safetensors(path, tensors):
    """Writes a dict name -> tensor as one safetensors file (FP32 tensors stay FP32)."""
    inverse = {v: k for k, v in SAFETENSORS_DTYPES.items()}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        size = t.numel() * t.element_size()
        header[name] = {"dtype": inverse[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for t in tensors.values():
            f.write(t.detach().contiguous().cpu().view(torch.uint8).numpy().data)


def load_checkpoint(model, location, log=sys.stderr):
    """Copies a checkpoint into `model`; raises CheckpointError on a missing or misshapen tensor.

    Tensors of blocks the (possibly shallower) model does not have, and any
    other names it does not know, are ignored with one note on `log`.
    """
    reader = SafetensorsReader(location)
    params = dict(model.named_parameters())
    missing = [name for name in params if name not in reader.index]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise CheckpointError(f"{location}: checkpoint lacks tensor {', '.join(missing[:3])}{more}")
    for name, param in params.items():
        dtype = reader.index[name][2].get("dtype")
        if dtype not in SAFETENSORS_DTYPES:
            raise CheckpointError(f"{name}: checkpoint dtype {dtype} is not a float type (F32, F16, BF16, F64)")
        if reader.shape(name) != tuple(param.shape):
            raise CheckpointError(f"{name}: checkpoint has shape {list(reader.shape(name))}, "
                                  f"the H3 decoder needs {list(param.shape)}")
    unused = sorted(set(reader.index) - set(params))
    if unused:
        print(f"note: ignoring {len(unused)} checkpoint tensors the model does not use (e.g. {unused[0]})",
              file=log)
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(reader.get(name).to(torch.float32))


def build_model(blocks, seed, device, weights=None, requires_grad=False):
    """Builds the decoder with synthetic weights from `seed`, or from the checkpoint `weights`.

    requires_grad=False (inference mode) turns the parameters' requires_grad off;
    requires_grad=True (serving mode) leaves them as nn.Module makes them (on), which
    is what lets autocast cache its FP16 casts of them."""
    with torch.device("meta"):
        model = H3VAEDecoder(blocks)
    model = model.to_empty(device=device)
    model.decoder.zero_token.zero_()
    if weights:
        load_checkpoint(model, weights)
    else:
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(synthetic_value(name, tuple(param.shape), seed, device))
    if not requires_grad:
        model.requires_grad_(False)
    return model.eval()


def autocast(device):
    """The decode's autocast context: float16 on CUDA (and, development only, on the CPU)."""
    return torch.autocast(device.type, dtype=HALF)


@contextlib.contextmanager
def decode_context(mode, device):
    """The grad mode and autocast region a decode runs in: "inference",
    torch.inference_mode() and autocast(device); "serving", torch.no_grad() and
    autocast(device) with its cast cache on (the default), entered once per request
    (autocast drops its cached casts when the outermost region exits)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {MODES}")
    with (torch.inference_mode() if mode == "inference" else torch.no_grad()), autocast(device):
        yield


def uncached_casts():
    """A nested CUDA autocast region like the current one with autocast's cast cache
    off (nothing outside an autocast region). The cache is the outermost region's;
    nesting neither clears it nor exits the outer region (torch.autocast clears the
    cache only when the nesting count returns to 0)."""
    if not torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)


class TiledDecoder:
    """Decodes whole latents with the tiling of an h3_tiling.Plan, eagerly or by CUDA-graph replay.

    Call inside decode_context(mode, device) (in serving mode one per request).
    With cuda_graphs, each distinct tile shape is captured once (static input
    and output buffers) and every ViT call of that shape is a copy into the
    static input plus a replay; blending runs eagerly in FP32 either way. In
    serving mode the captures run with autocast's cast cache off (capture's
    cast_cache): a graph lives across requests, and the cached casts of the
    request it was captured in do not. With tile_batch N > 1, the tiles of a
    temporal chunk go through the ViT N at a time, concatenated along the
    batch dimension (the chunk's last call may take fewer); the blending is
    the same, but the ViT's GEMMs run at N times the rows, where cuBLAS may
    choose kernels that round otherwise, so the output's bits are not
    guaranteed to be tile_batch 1's (compare hashes only between decodes of
    the same tile_batch), and the H3 block signature (recorded at batch 1)
    does not match those calls. A plan whose tiles have fewer frames than a
    chunk (h3_tiling.make_plan's tile) covers each chunk with several tiles
    along time, weighted by their ramps over output frames and normalised
    like the spatial tiles; with one tile a chunk (the default) no weight
    along time is made or applied.
    """

    def __init__(self, model, plan, device, cuda_graphs=False, mode="inference", tile_batch=1):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        if tile_batch < 1:
            raise ValueError("tile_batch must be >= 1")
        self.model, self.plan, self.device, self.cuda_graphs = model, plan, device, cuda_graphs
        self.mode, self.tile_batch = mode, tile_batch
        b, _, tt, th, tw = plan.tile_shape
        p = PIXELS_PER_LATENT
        rows = [torch.tensor(ramp(r, th, list(plan.rows))) for r in plan.rows]
        cols = [torch.tensor(ramp(c, tw, list(plan.cols))) for c in plan.cols]
        spatial, wsum = [], torch.zeros(plan.height, plan.width)
        for r, wr in zip(plan.rows, rows):
            for c, wc in zip(plan.cols, cols):
                weight = wr[:, None] * wc[None, :]
                wsum[r * p:(r + th) * p, c * p:(c + tw) * p] += weight
                spatial.append((r, c, weight.to(device)))
        self.tiles = [(f, r, c, weight) for f in plan.times for r, c, weight in spatial]
        self.wsum = wsum.to(device)
        self.frame_weight, self.wsum_t = {}, None
        if len(plan.times) > 1:
            q, wsum_t = FRAMES_PER_LATENT, torch.zeros(CHUNK_OUT_FRAMES)
            for f in plan.times:
                wf = torch.tensor(ramp(f, tt, list(plan.times), q))
                wsum_t[f * q:(f + tt) * q] += wf
                self.frame_weight[f] = wf.reshape(1, 1, -1, 1, 1).to(device)
            self.wsum_t = wsum_t.reshape(1, 1, -1, 1, 1).to(device)
        fade = (torch.arange(BLEND_FRAMES, dtype=torch.float32) + 1) / (BLEND_FRAMES + 1)
        self.fade_in = fade.reshape(1, 1, -1, 1, 1).to(device)
        self.fade_out = (1 - fade).reshape(1, 1, -1, 1, 1).to(device)
        self.groups = [self.tiles[i:i + tile_batch] for i in range(0, len(self.tiles), tile_batch)]
        self.graphs = {}
        self.vit_calls = 0

    def vit(self, tile):
        """One ViT call on a latent tile [B,24,tt,th,tw]; returns FP32 pixels."""
        self.vit_calls += 1
        if not self.cuda_graphs:
            return self.model(tile)
        key = tuple(tile.shape)
        if key not in self.graphs:
            self.graphs[key] = self._capture(tile)
        graph, static_in, static_out = self.graphs[key]
        static_in.copy_(tile)
        graph.replay()
        return static_out

    def _capture(self, tile):
        static_in = tile.clone(memory_format=torch.contiguous_format)
        graph, static_out = capture(lambda: self.model(static_in), warmups=2, cast_cache=self.mode != "serving")
        return graph, static_in, static_out

    def __call__(self, latent):
        plan, p = self.plan, PIXELS_PER_LATENT
        b, _, tt, th, tw = plan.tile_shape
        q = FRAMES_PER_LATENT
        video = torch.empty(b, OUT_CHANNELS, plan.frames, plan.height, plan.width, device=self.device)
        prev = None
        for k, t0 in enumerate(plan.chunks):
            chunk = torch.zeros(b, OUT_CHANNELS, CHUNK_OUT_FRAMES, plan.height, plan.width, device=self.device)
            for group in self.groups:
                if len(group) == 1:
                    f, r, c, _ = group[0]
                    outs = [self.vit(latent[:, :, t0 + f:t0 + f + tt, r:r + th, c:c + tw])]
                else:  # --tile-batch: one ViT call of len(group) tiles; its output's slices used before the next
                    outs = self.vit(torch.cat([latent[:, :, t0 + f:t0 + f + tt, r:r + th, c:c + tw]
                                               for f, r, c, _ in group])).split(b)
                for (f, r, c, weight), pixels in zip(group, outs):
                    if f in self.frame_weight:  # several tiles a chunk along time
                        weight = weight * self.frame_weight[f]
                    chunk[:, :, f * q:(f + tt) * q, r * p:(r + th) * p, c * p:(c + tw) * p] += pixels * weight
            chunk /= self.wsum
            if self.wsum_t is not None:
                chunk /= self.wsum_t
            if prev is not None:
                chunk[:, :, :BLEND_FRAMES] = (prev[:, :, KEEP_FRAMES:KEEP_FRAMES + BLEND_FRAMES] * self.fade_out
                                              + chunk[:, :, :BLEND_FRAMES] * self.fade_in)
            keep = CHUNK_OUT_FRAMES if k == len(plan.chunks) - 1 else KEEP_FRAMES
            video[:, :, k * KEEP_FRAMES:k * KEEP_FRAMES + keep] = chunk[:, :, :keep]
            prev = chunk
        return video


def to_frames(video):
    """uint8 frames [B, F, H, W, 3] from the FP32 video in [-1, 1]."""
    return ((video.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 4, 1).contiguous()


def sha256(t):
    """SHA-256 of a tensor's raw little-endian bytes in C order."""
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy()).hexdigest()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values):
    s = sorted(values)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if n else float("nan")


def block_inputs(model, tokens_grid, device, seed):
    """A deterministic FP32 residual stream and RoPE tables for a t x hh x ww token grid."""
    t, hh, ww = tokens_grid
    s = t * hh * ww + EXTRA_TOKENS
    h = make_latent((1, s, WIDTH), seed, device)
    cos, sin = model.decoder.rope_tables(1, t, hh, ww, device)
    return h, cos, sin


def capture(fn, times=1, warmups=1, cast_cache=True):
    """A CUDA graph of `times` calls of fn(), after `warmups` calls on a side
    stream (PyTorch's usual warm-up, so that nothing is loaded during the
    capture); returns the graph and what the last captured call returned.

    cast_cache=False runs the warm-ups and the capture inside uncached_casts(),
    autocast's cast cache off: every weight cast is made, and captured, by the
    call itself. Needed in serving mode's autocast region (cache on, parameters
    requiring grad): PyTorch does not turn the cache off for a capture
    (torch.cuda.graph and CUDAGraph.capture_begin leave autocast alone; only
    make_graphed_callables refuses an enabled cache), so the warm-ups would
    cache the FP16 casts in ordinary memory and the graph would read those
    tensors without casting, and the region's exit frees them (autocast clears
    its cache when the outermost region exits): the graph's next replay in a
    later region would read memory the allocator has given to something else.
    In inference mode the cache is never used (the parameters do not require
    grad), so cast_cache changes nothing there."""
    with (contextlib.nullcontext() if cast_cache else uncached_casts()):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmups):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(times):
                out = fn()
    return graph, out


def event_ms(fn, reps, per=1):
    """The median over `reps` of the CUDA-event time of fn() on the current stream, over `per`."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per)
    return median(times)


def profile_block(model, device, reps=50, run_len=10, seed=0, mode="inference"):
    """Times block 0 at 1797 tokens (a 7x16x16 tile); returns a dict of ms per block.

    eager_ms: median over `reps` of (CUDA-event span of `run_len` back-to-back
    eager calls) / run_len, the figure DESIGN.md compares with 0.99 ms.
    graph_ms: the same for replays of one captured block (GPU time only;
    DESIGN.md: 0.93 ms). host_ms: median host time to enqueue one block.
    On the CPU only eager_ms (wall time) is measured.

    Every call runs in one decode_context(mode, device). In serving mode (the
    model built with requires_grad=True) the first warm-up call casts the
    weights and autocast caches the casts, so the timed eager calls cast no
    weight, as a request's later tiles; the graph is captured with the cache
    off (capture's cast_cache), as the --cuda-graphs decode captures, so its
    replays cast every weight.

    Each block's output is kept until the next block's has been made, as in
    the decode (where it is the next block's input): a block whose output
    nobody holds is not the decode's block (its last sum is freed at once).
    """
    block = model.decoder.blocks[0]
    h, cos, sin = block_inputs(model, (7, 16, 16), device, seed)
    result = {"tokens": h.shape[1], "reps": reps, "run_len": run_len}
    held = [None]

    def run():
        held[0] = block(h, cos, sin)

    with decode_context(mode, device):
        for _ in range(5):
            run()
        sync(device)
        if device.type != "cuda":
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                run()
                times.append((time.perf_counter() - t0) * 1e3)
            result["eager_ms"] = median(times)
            return result
        eager, host = [], []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(run_len):
                t0 = time.perf_counter()
                run()
                host.append((time.perf_counter() - t0) * 1e3)
            end.record()
            end.synchronize()
            eager.append(start.elapsed_time(end) / run_len)
        result["eager_ms"], result["host_ms"] = median(eager), median(host)
        graph, _ = capture(run, cast_cache=mode != "serving")
        graph.replay()

        def replays():
            for _ in range(run_len):
                graph.replay()

        result["graph_ms"] = event_ms(replays, reps, per=run_len)
        result["kernels"] = kernel_table(run, device)
    return result


# DESIGN.md's reference table ("Where the time goes", ms per block at 1797
# tokens) and how kernel names fall into its rows; fused kernels of the shim
# (h3_*) get rows of their own.
KERNEL_ROWS = (("fused (h3shim)", ("h3_",)), ("SDPA", ("sdpa", "flash", "cudnn")),
               ("GEMMs", ("gemm", "xmma", "nvjet", "cutlass", "sm90_")), ("casts", ("float16_copy",)),
               ("RMSNorm", ("layer_norm",)), ("cat", ("CatArrayBatchedCopy",)), ("silu", ("silu",)),
               ("strided copies", ("direct_copy",)), ("Half binary ops", ("Half",)),
               ("residual mul/add", ("float",)))
DESIGN_KERNEL_MS = {"GEMMs": 0.33, "SDPA": 0.08, "casts": 0.127, "RMSNorm": 0.102, "Half binary ops": 0.079,
                    "cat": 0.062, "silu": 0.042, "residual mul/add": 0.05, "strided copies": 0.029}


def kernel_row(name):
    """The row of DESIGN.md's table a kernel's name falls into ("other" for none)."""
    return next((r for r, keys in KERNEL_ROWS if any(k in name for k in keys)), "other")


def kernel_table(run_block, device, reps=20, per=1):
    """GPU time per block by kernel and by DESIGN.md's rows: `reps` calls of
    run_block (eager blocks, or replays of a graph of `per` blocks) under the
    profiler (CUPTI sees every kernel, the shim's driver launches and a graph's
    nodes too), after one call with the profiler waiting and two warming it
    up, which are not counted (the profiler's start has broken the first
    block's group). Also the GPU's idle time between one kernel's end and the
    next one's start inside a call, in all and by the kernel after the gap.
    A profiler failure is reported in the result, not raised: the table is extra."""
    try:
        schedule = torch.profiler.schedule(wait=1, warmup=2, active=reps)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], schedule=schedule) as prof:
            for _ in range(1 + 2 + reps):
                run_block()
                sync(device)
                prof.step()
        events = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                        if e.device_type == torch.autograd.DeviceType.CUDA and e.name)
    except Exception as e:  # noqa: BLE001  (whatever the profiler raises)
        return {"error": f"{type(e).__name__}: {e}"}
    scale = 1e3 * reps * per
    per_kernel, gaps, prev_end = {}, [], None
    for start, end, name in events:
        per_kernel[name] = per_kernel.get(name, 0.0) + (end - start) / scale
        if prev_end is not None and start > prev_end:
            gaps.append((start - prev_end, name))
        prev_end = end if prev_end is None else max(prev_end, end)
    # The reps - 1 longest gaps are the host's between two calls (a sync, the next launch).
    gap_before = {}
    for us, name in sorted(gaps)[:max(len(gaps) - (reps - 1), 0)]:
        gap_before[name] = gap_before.get(name, 0.0) + us / scale
    rows = {}
    for name, ms in per_kernel.items():
        rows[kernel_row(name)] = rows.get(kernel_row(name), 0.0) + ms
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:40]
    gaps = sorted(gap_before.items(), key=lambda kv: -kv[1])[:20]
    return {"ms_per_block_by_row": rows, "total_ms": sum(per_kernel.values()),
            "design_ms_by_row": DESIGN_KERNEL_MS, "ms_per_block_by_kernel": [[n[:160], ms] for n, ms in top],
            "gap_ms": sum(gap_before.values()), "gap_ms_before_kernel": [[n[:160], ms] for n, ms in gaps]}


def profile_vit(model, device, reps=20, seed=0, mode="inference"):
    """One ViT call at 1797 tokens (a [1,24,7,16,16] tile) captured in a CUDA
    graph as the --cuda-graphs decode captures it (in decode_context(mode); in
    serving mode with the cast cache off), then replayed: the median
    CUDA-event time of a replay, per call and per block, and the kernel table
    of the replays (kernels' GPU time and the idle gaps between them, per block)."""
    blocks = len(model.decoder.blocks)
    tile = make_latent((1, LATENT_CHANNELS, 7, 16, 16), seed, device)
    with decode_context(mode, device):
        graph, _ = capture(lambda: model(tile), warmups=2, cast_cache=mode != "serving")
        graph.replay()
        ms = event_ms(graph.replay, reps)
        result = {"tokens": 7 * 16 * 16 + EXTRA_TOKENS, "blocks": blocks, "reps": reps,
                  "replay_ms": ms, "replay_ms_per_block": ms / blocks}
        result["kernels"] = kernel_table(graph.replay, device, reps=reps, per=blocks)
        result["gpu_state"] = gpu_state_during(graph.replay, device)
    return result


class Nvml:
    """The GPU's own counters through NVML (libnvidia-ml.so.1, the library nvidia-smi reads), by ctypes:
    its total energy since the driver loaded (mJ), the SM clock now (MHz) and the active clock-event
    reasons (a bit mask: 0x4 the software power cap). Each reader returns None where the library, the
    device or the query is missing, so a caller reports nothing rather than fails."""

    SM_CLOCK = 1  # NVML_CLOCK_SM

    def __init__(self, device):
        import ctypes
        self.ct, self.lib, self.dev = ctypes, None, None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            dev = ctypes.c_void_p()
            uuid = f"GPU-{torch.cuda.get_device_properties(device).uuid}".encode()
            if lib.nvmlDeviceGetHandleByUUID(ctypes.c_char_p(uuid), ctypes.byref(dev)) != 0:
                return
            self.lib, self.dev = lib, dev
        except (OSError, AttributeError, RuntimeError):
            pass

    def _read(self, names, ctype, *args):
        if self.lib is None:
            return None
        for name in names:
            fn = getattr(self.lib, name, None)
            if fn is None:
                continue
            value = ctype()
            if fn(self.dev, *args, self.ct.byref(value)) == 0:
                return value.value
        return None

    def energy_mj(self):
        return self._read(("nvmlDeviceGetTotalEnergyConsumption",), self.ct.c_ulonglong)

    def sm_clock_mhz(self):
        return self._read(("nvmlDeviceGetClockInfo",), self.ct.c_uint, self.ct.c_int(self.SM_CLOCK))

    def event_reasons(self):
        return self._read(("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                          self.ct.c_ulonglong)


def gpu_state_during(fn, device, seconds=3.0):
    """What nvidia-smi reads every 50 ms while fn() runs back to back (synchronised
    each call) for `seconds`, past the first half second: the median SM clock (MHz),
    power (W) and temperature (C), and every clock-event reason seen (a bit mask,
    e.g. 0x4 software power cap). A GPU that slows its clock under a denser
    load makes the same kernels slower in one arm than in another. Past the same
    half second, the GPU's energy counter (NVML) gives the energy of one call of fn
    (energy_mj_per_call: the whole GPU's, idle power included) where it can be read."""
    query = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    nvml = Nvml(device)
    try:
        smi = subprocess.Popen(["nvidia-smi", "-i", f"GPU-{uuid}", f"--query-gpu={query}",
                                "--format=csv,noheader,nounits", "-lms", "50"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        return {"error": f"nvidia-smi: {e}"}
    start = time.time()
    calls, energy_start = 0, None
    while time.time() - start < seconds:
        fn()
        sync(device)
        if energy_start is None and time.time() - start >= 0.5:
            energy_start, calls = nvml.energy_mj(), 0
        else:
            calls += 1
    energy_end = nvml.energy_mj()
    smi.terminate()
    lines = smi.communicate()[0].splitlines()
    rows = []
    for line in lines[10:]:
        parts = [p.strip() for p in line.split(",")]
        try:
            rows.append((float(parts[0]), float(parts[1]), float(parts[2]), int(parts[3], 16)))
        except (ValueError, IndexError):
            continue
    if not rows:
        return {"error": "no readings", "output": lines[:5]}
    reasons = 0
    for r in rows:
        reasons |= r[3]
    state = {"samples": len(rows), "sm_clock_mhz": median([r[0] for r in rows]),
             "power_w": median([r[1] for r in rows]), "temperature_c": median([r[2] for r in rows]),
             "clock_event_reasons": hex(reasons)}
    if energy_start is not None and energy_end is not None and calls > 0:
        state.update(energy_mj_per_call=(energy_end - energy_start) / calls, energy_calls=calls)
    return state


def dispatch_floor(model, device, reps=20, seed=0, mode="inference"):
    """Wall time per block of the whole block stack at 6 tokens (a 1x1x1 latent tile).

    At this size the GPU waits on the host, so the figure is PyTorch's (plus
    any interposer's) host dispatch cost per block. All calls run in one
    decode_context(mode, device): in serving mode the three untimed calls
    cast the weights once and the timed ones use autocast's cached casts.
    Returns a dict.
    """
    h, cos, sin = block_inputs(model, (1, 1, 1), device, seed)
    blocks = len(model.decoder.blocks)
    times = []
    with decode_context(mode, device):
        for i in range(reps + 3):
            sync(device)
            t0 = time.perf_counter()
            model.decoder.run_blocks(h, cos, sin)
            sync(device)
            if i >= 3:
                times.append((time.perf_counter() - t0) * 1e3 / blocks)
    return {"tokens": h.shape[1], "blocks": blocks, "reps": reps, "ms_per_block": median(times),
            "samples_ms_per_block": times}


def activation_stats(model, decoder, latent, mode="inference"):
    """Decodes `latent` once with hooks and returns max |value| per kind of activation.

    Kinds: the input and output of every Linear and of post_quant_conv (by
    module name without the block number) and every block's output h.
    `fp16_headroom` is 65504 over the largest FP16 activation, which must stay
    well above 1; `finite` is False if any activation is Inf or NaN.
    """
    maxima, half_kinds, hooks = {}, set(), []

    def record(kind, t):
        maxima.setdefault(kind, []).append(t.detach().abs().amax().float())
        if t.dtype == HALF:
            half_kinds.add(kind)

    for name, module in model.named_modules():
        kind = ".".join(p for p in name.split(".") if not p.isdigit())
        if isinstance(module, (nn.Linear, nn.Conv3d)):
            def hook(_m, args, out, kind=kind):
                record(kind + ":in", args[0])
                record(kind + ":out", out)
            hooks.append(module.register_forward_hook(hook))
        elif isinstance(module, Block):
            hooks.append(module.register_forward_hook(lambda _m, _a, out, kind=kind: record(kind + ":out", out)))
    try:
        with decode_context(mode, latent.device):
            decoder(latent)
    finally:
        for h in hooks:
            h.remove()
    result = {kind: torch.stack(v).max().item() for kind, v in sorted(maxima.items())}
    largest_half = max((result[k] for k in half_kinds), default=0.0)
    return {"max_abs": result, "fp16_kinds": sorted(half_kinds),
            "finite": all(math.isfinite(v) for v in result.values()),
            "fp16_headroom": 65504.0 / largest_half if largest_half else None}
