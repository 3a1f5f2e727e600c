"""Small torch modules, one per family of exported op patterns, for
sweep.py: spectral (an FNO layer's rfft2/irfft2), sampling (grid_sample,
bicubic and antialiased resizes, pixel (un)shuffle, fold/unfold), index
and scatter ops, sorting, cumulative ops, convolutions and pools in 1-3-D,
recurrences and attention as torch's own modules write them. Random
weights; each returns its name -> (factory, input shape)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IMAGE = (2, 4, 8, 8)
SEQUENCE = (2, 8, 32)


class Fn(nn.Module):
    """f(x, *modules): the modules' parameters are the model's weights."""
    def __init__(self, f, *modules: nn.Module):
        super().__init__()
        self.f, self.mods = f, nn.ModuleList(modules)

    def forward(self, x):
        return self.f(x, *self.mods)


class FNO2d(nn.Module):
    """A Fourier neural operator layer: the lowest m x m modes mixed by
    complex weights (as real and imaginary parts), a pointwise Conv beside."""
    def __init__(self, c: int = 4, m: int = 3):
        super().__init__()
        self.m = m
        self.wr = nn.Parameter(torch.randn(c, c, m, m) / c)
        self.wi = nn.Parameter(torch.randn(c, c, m, m) / c)
        self.lift = nn.Conv2d(c, c, 1)

    def forward(self, x):
        m = self.m
        xf = torch.fft.rfft2(x)
        re, im = xf.real[:, :, :m, :m], xf.imag[:, :, :m, :m]
        mix = lambda a, w: torch.einsum("bixy,ioxy->boxy", a, w)  # noqa: E731
        out = x.new_zeros(x.shape[0], self.wr.shape[1], x.shape[2], x.shape[3] // 2 + 1, 2)
        out[:, :, :m, :m, 0] = mix(re, self.wr) - mix(im, self.wi)
        out[:, :, :m, :m, 1] = mix(re, self.wi) + mix(im, self.wr)
        y = torch.fft.irfft2(torch.view_as_complex(out), s=x.shape[-2:])
        return F.gelu(y + self.lift(x))


class Coupling(nn.Module):
    """A RealNVP affine coupling layer on the rows' halves, then the other
    way round: y2 = x2 * exp(s(x1)) + t(x1), and log|det J| summed."""
    def __init__(self, d: int = 32):
        super().__init__()
        self.nets = nn.ModuleList(nn.Sequential(nn.Linear(d // 2, 16), nn.Tanh(),
                                                nn.Linear(16, d)) for _ in range(2))

    def forward(self, x):
        z = _rows(x)
        h = z.shape[-1] // 2
        logdet = 0
        for net in self.nets:
            a, b = z[..., :h], z[..., h:]
            s, t = net(a).chunk(2, -1)
            s = torch.tanh(s)
            z = torch.cat([b * torch.exp(s) + t, a], -1)
            logdet = logdet + s.sum(-1, keepdim=True)
        return z * logdet


class KANLayer(nn.Module):
    """A Kolmogorov-Arnold layer: each input through order-1 B-splines (hat
    functions on a uniform grid, written with comparisons) plus SiLU."""
    def __init__(self, d_in: int = 8, d_out: int = 4, grid: int = 6):
        super().__init__()
        self.register_buffer("knots", torch.linspace(-2, 2, grid))
        self.coef = nn.Parameter(torch.randn(d_in, grid, d_out) / grid)
        self.base = nn.Linear(d_in, d_out)

    def forward(self, x):
        u = x.reshape(-1, 8)
        k = self.knots
        h = k[1] - k[0]
        d = (u.unsqueeze(-1) - k) / h
        hat = torch.clamp(1 - d.abs(), min=0)
        return torch.einsum("big,igo->bo", hat, self.coef) + self.base(F.silu(u))


def _theta(x, scale: float = 1.0):
    t = torch.tensor([[[0.9, 0.1, 0.05], [-0.1, 1.1, 0.0]]], dtype=x.dtype) * scale
    return t.expand(x.shape[0], 2, 3)


def _rows(x):
    return x.reshape(SEQUENCE)


def _unrolled_cell(x, cell):
    rows = _rows(x)
    h = torch.tanh(rows[:, 0, :6])
    for t in range(rows.shape[1]):
        h = cell(rows[:, t], h)
    return h


def op_modules() -> dict:
    index = torch.tensor([0, 1, 1, 4, 2, 0, 3, 3])
    causal = torch.triu(torch.ones(8, 8, dtype=torch.bool), 1)
    modules = {
        "fno2d": lambda: FNO2d(),
        "grid_sample": lambda: Fn(lambda x: F.grid_sample(
            x, F.affine_grid(_theta(x), list(x.shape), align_corners=False),
            align_corners=False)),
        "grid_sample_border": lambda: Fn(lambda x: F.grid_sample(
            torch.tanh(x), F.affine_grid(_theta(x, 1.3), list(x.shape), align_corners=True),
            padding_mode="border", align_corners=True)),
        "grid_sample_x": lambda: Fn(lambda x: F.grid_sample(
            x[:, :2], torch.tanh(x[:, 2:].permute(0, 2, 3, 1)), align_corners=False)),
        "pixel_shuffle": lambda: Fn(lambda x, c: F.pixel_shuffle(c(x), 2),
                                    nn.Conv2d(4, 16, 3, padding=1)),
        "pixel_unshuffle": lambda: Fn(lambda x: torch.sin(F.pixel_unshuffle(x, 2))),
        "bicubic": lambda: Fn(lambda x: F.interpolate(torch.tanh(x), scale_factor=1.5,
                                                      mode="bicubic")),
        "bicubic_align_corners": lambda: Fn(lambda x: F.interpolate(
            torch.tanh(x), size=(11, 5), mode="bicubic", align_corners=True)),
        "bilinear_antialias": lambda: Fn(lambda x: F.interpolate(
            torch.tanh(x), size=(5, 3), mode="bilinear", antialias=True)),
        "unfold": lambda: Fn(lambda x: torch.tanh(F.unfold(x, 3, padding=1, stride=2))),
        "fold": lambda: Fn(lambda x: F.fold(torch.tanh(x.reshape(2, 16, 16)), (5, 5), 2)),
        "scatter_add": lambda: Fn(lambda x: x.new_zeros(x.shape[0], 4, 5, 8).scatter_add(
            2, index.view(1, 1, 8, 1).expand(x.shape[0], 4, 8, 8), torch.sin(x))),
        "index_add": lambda: Fn(lambda x: x.new_zeros(x.shape[0], 4, 5, 8).index_add(
            2, index, x * x)),
        "gather_index_select": lambda: Fn(lambda x: torch.gather(
            x, 3, torch.tensor([7, 0, 3, 3, 1]).expand(x.shape[0], 4, 8, 5))
            * x.index_select(3, torch.tensor([1, 1, 6, 0, 7]))),
        "sort_topk": lambda: Fn(lambda x: torch.sort(x, dim=3)[0]
                                * torch.topk(x, 3, dim=2)[0].sum(2, keepdim=True)),
        "cumsum_logcumsumexp": lambda: Fn(lambda x: torch.cumsum(x, 2)
                                          + torch.logcumsumexp(x, 1)),
        "cdist": lambda: Fn(lambda x: torch.cdist(x.reshape(-1, 16, 16),
                                                  x.reshape(-1, 16, 16)[:, :5] * 0.7 + 0.1)),
        "einsum_ellipsis": lambda: Fn(lambda x: torch.einsum("...ij,...jk->...ik", x, torch.tanh(x))
                                      + torch.einsum("bcij->bji", x).unsqueeze(1)),
        "group_instance_norm": lambda: Fn(lambda x, g, i: i(g(x)), nn.GroupNorm(2, 4),
                                          nn.InstanceNorm2d(4, affine=True)),
        "activations": lambda: Fn(lambda x: F.gelu(x, approximate="tanh") + F.silu(x)
                                  + F.mish(x) + F.hardswish(x) + F.elu(x)
                                  + F.softplus(x, beta=2) + F.logsigmoid(x)),
        "masked_softmax": lambda: Fn(lambda x: torch.softmax(
            x.masked_fill(causal, float("-inf")), -1)),
        "math": lambda: Fn(lambda x: torch.atan2(x, x * x + 0.5)
                           + torch.logsumexp(x, 2, keepdim=True)
                           + torch.linalg.vector_norm(x, 2, dim=3, keepdim=True)
                           + F.normalize(x, dim=1)),
        "roll_flip_triangles": lambda: Fn(lambda x: torch.roll(x, 3, 2) * torch.flip(x, [3])
                                          + torch.tril(x) - torch.triu(x, 1).exp()),
        "clamp_by_tensors": lambda: Fn(lambda x: torch.clamp(
            x, min=-torch.ones(8) * 0.3, max=torch.linspace(0.1, 1.0, 8))),
        "convs": lambda: Fn(lambda x, a, b, c: c(torch.tanh(b(torch.tanh(a(x))))),
                            nn.Conv2d(4, 8, 3, padding=2, dilation=2, groups=2),
                            nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
                            nn.Conv2d(4, 3, (3, 1), stride=(2, 1))),
        "conv1d": lambda: Fn(lambda x, a, b: b(torch.tanh(a(x.reshape(-1, 4, 64)))),
                             nn.Conv1d(4, 6, 5, stride=2, padding=2), nn.Conv1d(6, 2, 3)),
        "conv3d": lambda: Fn(lambda x, a: a(x.reshape(-1, 1, 4, 8, 8)),
                             nn.Conv3d(1, 2, 3, padding=1, stride=(1, 2, 2))),
        "ceil_mode_pools": lambda: Fn(lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True).sum(3)
                                      + F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True,
                                                     count_include_pad=False).sum(3)[..., :4]),
        "adaptive_avg_pool": lambda: Fn(lambda x: F.adaptive_avg_pool2d(x, (3, 5))),
        "adaptive_avg_pool_factor": lambda: Fn(lambda x: F.adaptive_avg_pool2d(torch.tanh(x),
                                                                                (4, 2))),
        "lstm_bidirectional": lambda: Fn(lambda x, r: r(_rows(x))[0], nn.LSTM(
            32, 6, num_layers=2, bidirectional=True, batch_first=True)),
        "gru_bidirectional": lambda: Fn(lambda x, r: r(_rows(x))[0], nn.GRU(
            32, 6, num_layers=2, bidirectional=True, batch_first=True)),
        "multihead_attention": lambda: Fn(lambda x, a: a(
            _rows(x), _rows(x), _rows(x), need_weights=False)[0],
            nn.MultiheadAttention(32, 4, batch_first=True)),
        "transformer_layer": lambda: Fn(lambda x, t: t(_rows(x)), nn.TransformerEncoderLayer(
            32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)),
        "sdpa_causal": lambda: Fn(lambda x: F.scaled_dot_product_attention(
            x, torch.tanh(x), x * 0.5, is_causal=True)),
        "pads": lambda: Fn(lambda x: F.pad(x, (1, 2, 0, 1), mode="reflect")
                           + F.pad(x, (1, 2, 0, 1), mode="replicate")
                           + F.pad(x, (1, 2, 0, 1), mode="circular")),
        "conv_same_padding": lambda: Fn(lambda x, c: c(x), nn.Conv2d(4, 3, (3, 4), padding="same",
                                                                      dilation=(1, 2))),
        "pools_1d_3d": lambda: Fn(lambda x: F.max_pool1d(x.reshape(-1, 4, 64), 3, 2,
                                                         dilation=2).sum(2)
                                  + F.avg_pool3d(x.reshape(-1, 1, 4, 8, 8), 2).sum((2, 3, 4))),
        "trilinear_nearest_exact": lambda: Fn(lambda x: F.interpolate(
            x.reshape(-1, 1, 4, 8, 8), size=(4, 5, 10), mode="trilinear").sum(1)
            + F.interpolate(x, size=(5, 10), mode="nearest-exact")),
        "pointwise_more": lambda: Fn(lambda x: F.glu(x, dim=1) * F.relu6(3 * x[:, :2])
                                     + F.hardtanh(x[:, 2:], -0.5, 0.7) + F.celu(x[:, :2], 0.5)
                                     + F.selu(x[:, 2:]) + F.softsign(x[:, :2])
                                     + F.tanhshrink(x[:, 2:]) + F.softshrink(x[:, :2], 0.3)
                                     + F.threshold(x[:, 2:], 0.1, -1.0) + torch.erf(x[:, :2])),
        "prelu_layernorm": lambda: Fn(lambda x, p, n: n(p(x)), nn.PReLU(4, 0.2),
                                      nn.LayerNorm((8, 8), elementwise_affine=False)),
        "rms_norm": lambda: Fn(lambda x, n: n(x), nn.RMSNorm(8)),
        "diff_cumsum_flip": lambda: Fn(lambda x: torch.diff(x, dim=3)
                                       * torch.cumsum(x.flip(2), 2)[..., 1:]),
        "where_broadcast": lambda: Fn(lambda x: torch.where(x > 0.2, x * x, torch.sin(x[:, :1]))
                                      + torch.where(x[..., :1] < 0, 1.0, x)),
        "norms": lambda: Fn(lambda x: torch.linalg.vector_norm(x, 1, dim=(2, 3), keepdim=True)
                            + x.norm(p=3, dim=1).unsqueeze(1).mean(2, keepdim=True)
                            + torch.amax(x, dim=2, keepdim=True) - torch.amin(x, dim=3,
                                                                              keepdim=True)),
        "matmul_batched": lambda: Fn(lambda x, w: w(x) + torch.bmm(
            x.reshape(-1, 8, 8), x.reshape(-1, 8, 8).transpose(1, 2)).reshape(x.shape),
            nn.Linear(8, 8)),
        "var_std": lambda: Fn(lambda x: torch.var(x, dim=(2, 3), keepdim=True)
                              + torch.std(x, dim=1, keepdim=True, correction=0)),
        # a Python loop over the sequence, written out step by step by the
        # exporters (each step reads x[:, t])
        "unrolled_gru_cell": lambda: Fn(_unrolled_cell, nn.GRUCell(32, 6)),
        "realnvp_coupling": lambda: Coupling(),
        "kan_layer": lambda: KANLayer(),
        # YOLOv5's Focus (a patch merge by strided slices) and interleaved
        # pairs rotated as GPT-J's rotary embedding does
        "focus_rotate_pairs": lambda: Fn(lambda x, c: c(torch.tanh(torch.cat(
            [x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]], 1)))
            + torch.sin(torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)).sum(),
            nn.Conv2d(16, 3, 3, padding=1)),
    }
    return {name: (make, IMAGE) for name, make in modules.items()}
