"""Tiling plan of the H3 video-VAE decode: which latent tiles become ViT calls.

This module is pure Python (standard library only) so that the tiling
arithmetic can be checked on a machine without PyTorch or a GPU.

Geometry. The decoder ViT maps one latent token (one latent voxel, patch size 1)
to 3 channels x 4 frames x 16 x 16 pixels. A ViT call decodes one tile of at
most 7 latent frames x 16 x 16 latent pixels, i.e. 7 * 16 * 16 = 1792 image
tokens, plus 4 register tokens and 1 zero token: 1797 tokens.

Temporal chunks. Chunks of 7 latent frames start every 5 latent frames; the
last start is clamped to T - 7, so a latent of T >= 7 frames gives
1 + ceil((T - 7) / 5) chunks. Each chunk decodes to 28 frames. The output
timeline places chunk k at frame 16 * k: every chunk but the last contributes
its first 16 frames, the last contributes all 28, and frames 0..4 of every
chunk k > 0 are a linear cross-fade (5 output frames) from the frames 16..20 of
chunk k - 1 (the frames that chunk would have shown next) into chunk k, with
weights (x + 1) / 6 for chunk k at frame x. Frames of the video:
28 + 16 * (chunks - 1). For [1,24,37,32,48]: 7 chunks, 124 frames; for
[1,24,62,48,84]: 12 chunks, 204 frames. The output timeline is therefore not a
positional 4x upsampling of the latent timeline: chunk k - 1 shows latent
frames 5(k-1) .. 5(k-1)+3 in full, its frames of latent 5k-1 .. 5k are
cross-faded into chunk k's frames of latent 5k .. 5k+1, so every seam
shortens the video by one latent frame (4 output frames):
4 * (37 - 6) = 124. This is the convention that gives the decoder's published
frame count (124 frames for 37 latent frames).

Spatial tiles. Along an axis of L latent pixels the tile size is min(16, L);
tiles are placed with a stride of at most 12 latent pixels (overlap of at least
4 latent = 64 output pixels): 1 + ceil((L - tile) / 12) tiles whose start
positions are spread evenly, round(i * (L - tile) / (n - 1)). Overlapping tiles
are blended with linear ramps that span each overlap (see ramp()), normalised
by the sum of weights, so two overlapping tiles cross-fade linearly and every
pixel's weights sum to one. For 32 x 48 latent pixels: 3 x 4 = 12 tiles.

So [1,24,37,32,48] decodes in 7 x 12 = 84 ViT calls (3024 block calls at 36
blocks) to 124 frames of 512 x 768 pixels, and [1,24,62,48,84] in
12 x 28 = 336 ViT calls.

Every tile of a plan has the same size: the last start is clamped, never
padded, so with the default tile every ViT call of a latent whose sides are
16 or more has 1797 tokens. Another tile size (make_plan's `tile`, serve.py's
--tile T,H,W; at most 7 frames) gives other token counts, T * H * W + 5:
spatial tiles of min(H, L) along an axis of L latent pixels at a stride of at
most H - H // 4 (12 for 16), and each temporal chunk covered by tiles of T
of its 7 frames placed the same way along time, blended with the same ramps
over their overlapping output frames (4 per latent frame) and normalised.
The chunks, the seams and the output are those of the default tile.
"""

import math
from dataclasses import dataclass

LATENT_CHANNELS = 24
CHUNK_FRAMES = 7
CHUNK_STRIDE = 5
FRAMES_PER_LATENT = 4
CHUNK_OUT_FRAMES = CHUNK_FRAMES * FRAMES_PER_LATENT
KEEP_FRAMES = 16
BLEND_FRAMES = 5
TILE = 16
PIXELS_PER_LATENT = 16
EXTRA_TOKENS = 5
DEFAULT_TILE = (CHUNK_FRAMES, TILE, TILE)


class LatentShapeError(ValueError):
    """The latent shape cannot be decoded; the message says why."""


def parse_latent(text):
    """Parses "B,C,T,H,W" and checks it; returns a tuple of five ints.

    Rules: batch >= 1, channels == 24, frames >= 7 (one temporal chunk),
    height >= 1 and width >= 1 (a side shorter than 16 gives one narrower
    tile). Raises LatentShapeError with a one-line reason otherwise.
    """
    parts = text.split(",")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise LatentShapeError(f"latent shape {text!r} is not five comma-separated integers B,C,T,H,W") from None
    if len(shape) != 5:
        raise LatentShapeError(f"latent shape {text!r} has {len(shape)} dimensions, expected 5 (B,C,T,H,W)")
    batch, channels, frames, height, width = shape
    if batch < 1:
        raise LatentShapeError(f"latent batch must be >= 1, got {batch}")
    if channels != LATENT_CHANNELS:
        raise LatentShapeError(f"latent channels must be {LATENT_CHANNELS}, got {channels}")
    if frames < CHUNK_FRAMES:
        raise LatentShapeError(f"latent frames must be >= {CHUNK_FRAMES} (one temporal chunk), got {frames}")
    if height < 1 or width < 1:
        raise LatentShapeError(f"latent height and width must be >= 1, got {height}x{width}")
    return shape


def parse_tile(text):
    """Parses "T,H,W", the latent size of a ViT call's tile, and checks it; returns a tuple of three ints.

    Rules: 1 <= T <= 7 (a temporal chunk's frames), H >= 1, W >= 1. Raises
    LatentShapeError with a one-line reason otherwise.
    """
    try:
        tile = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise LatentShapeError(f"tile {text!r} is not three comma-separated integers T,H,W") from None
    if len(tile) != 3:
        raise LatentShapeError(f"tile {text!r} has {len(tile)} dimensions, expected 3 (T,H,W)")
    if not 1 <= tile[0] <= CHUNK_FRAMES:
        raise LatentShapeError(f"tile frames must be 1..{CHUNK_FRAMES} (a temporal chunk), got {tile[0]}")
    if tile[1] < 1 or tile[2] < 1:
        raise LatentShapeError(f"tile height and width must be >= 1, got {tile[1]}x{tile[2]}")
    return tile


def axis_tiles(length, tile=TILE):
    """Returns (tile size, [start positions]) covering an axis of `length` latent pixels (or frames)
    with tiles of at most `tile`, at a stride of at most tile - tile // 4."""
    size = min(tile, length)
    count = 1 + math.ceil((length - size) / max(1, tile - tile // 4))
    if count == 1:
        return size, [0]
    return size, [round(i * (length - size) / (count - 1)) for i in range(count)]


def chunk_starts(frames):
    """Returns the first latent frame of every temporal chunk."""
    count = 1 + math.ceil((frames - CHUNK_FRAMES) / CHUNK_STRIDE)
    return [min(i * CHUNK_STRIDE, frames - CHUNK_FRAMES) for i in range(count)]


def ramp(start, size, starts, scale=PIXELS_PER_LATENT):
    """Blend weights (one per output pixel) of the tile at `start` along one axis.

    On each side that overlaps a neighbouring tile the weight rises (falls)
    linearly across the whole overlap with values (j + 0.5) / n, j = 0..n-1,
    n = overlap in output pixels; elsewhere it is 1. Two tiles that overlap get
    complementary ramps, so their normalised blend is an exact linear
    cross-fade. Returns a list of floats of length size * scale (output
    pixels per latent pixel; FRAMES_PER_LATENT along time).
    """
    out = size * scale
    weights = [1.0] * out
    index = starts.index(start)
    if index > 0:
        overlap = (starts[index - 1] + size - start) * scale
        for j in range(overlap):
            weights[j] = min(weights[j], (j + 0.5) / overlap)
    if index + 1 < len(starts):
        overlap = (start + size - starts[index + 1]) * scale
        for j in range(overlap):
            weights[out - 1 - j] = min(weights[out - 1 - j], (j + 0.5) / overlap)
    return weights


@dataclass(frozen=True)
class Plan:
    """The complete tiling of one latent shape."""

    latent: tuple
    chunks: tuple
    tile_h: int
    rows: tuple
    tile_w: int
    cols: tuple
    blocks: int
    tile_t: int = CHUNK_FRAMES
    times: tuple = (0,)  # the tiles' first frames within a temporal chunk

    @property
    def spatial_tiles(self):
        return len(self.rows) * len(self.cols)

    @property
    def vit_calls(self):
        return len(self.chunks) * len(self.times) * self.spatial_tiles

    @property
    def block_calls(self):
        return self.vit_calls * self.blocks

    @property
    def tokens_per_call(self):
        return self.tile_t * self.tile_h * self.tile_w + EXTRA_TOKENS

    @property
    def frames(self):
        return CHUNK_OUT_FRAMES + KEEP_FRAMES * (len(self.chunks) - 1)

    @property
    def height(self):
        return self.latent[3] * PIXELS_PER_LATENT

    @property
    def width(self):
        return self.latent[4] * PIXELS_PER_LATENT

    @property
    def tile_shape(self):
        """Latent shape of every ViT call's input tile: [B, 24, tt, th, tw] (tt = 7 by default)."""
        return (self.latent[0], LATENT_CHANNELS, self.tile_t, self.tile_h, self.tile_w)

    def summary(self, tile_batch=1):
        """Returns the plan as a JSON-ready dict (with "tile_times" only where a chunk has several tiles);
        with tile_batch N the tiles of a chunk go N to a ViT call, so the calls are counted so."""
        calls = len(self.chunks) * -(-len(self.times) * self.spatial_tiles // tile_batch)
        s = {
            "latent": list(self.latent),
            "blocks": self.blocks,
            "temporal_chunks": len(self.chunks),
            "chunk_starts": list(self.chunks),
            "spatial_tiles": self.spatial_tiles,
            "tile_rows": list(self.rows),
            "tile_cols": list(self.cols),
            "tile_latent": [self.tile_t, self.tile_h, self.tile_w],
            "tokens_per_call": self.tokens_per_call,
            "vit_calls": calls,
            "block_calls": calls * self.blocks,
            "tile_batch": tile_batch,
            "frames": self.frames,
            "height": self.height,
            "width": self.width,
        }
        if len(self.times) > 1:
            s["tile_times"] = list(self.times)
        return s


def make_plan(latent, blocks, tile=DEFAULT_TILE):
    """Builds the Plan of a checked latent shape (see parse_latent) for `blocks` blocks,
    with tiles of at most `tile` (T, H, W latent; see parse_tile)."""
    tile_t, times = axis_tiles(CHUNK_FRAMES, tile[0])
    tile_h, rows = axis_tiles(latent[3], tile[1])
    tile_w, cols = axis_tiles(latent[4], tile[2])
    return Plan(tuple(latent), tuple(chunk_starts(latent[2])), tile_h, tuple(rows), tile_w, tuple(cols), blocks,
                tile_t, tuple(times))
