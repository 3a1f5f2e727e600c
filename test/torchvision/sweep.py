"""torchvision's models, small Hugging Face stacks and small modules of
torch's op families (op_modules.py), exported by both of torch's ONNX
exporters and differentiated, against torch's own derivatives. Not part of
the test suite
(torch and torchvision are not project dependencies); run it after changing
the importer or the rules:

    # 1. in an environment with torch and torchvision (x86-64:
    #    pip install torch==2.14.1 torchvision==0.29.1 onnx onnxscript),
    #    and transformers for 27 small Hugging Face stacks:
    python test/torchvision/sweep.py export OUT [model,...] [kind,...]
    # 2. in the project's environment:
    python test/torchvision/sweep.py check OUT
    # 3. optionally, the same models as ONNX Runtime's graph optimizations
    #    save them (fused contrib ops: FusedConv, Gelu, SkipLayerNormalization):
    python test/torchvision/sweep.py optimize OUT OPT && \
        python test/torchvision/sweep.py check OPT

`export` writes OUT/<model>_{ts,ts_batch,dyn,dyn_batch}.onnx (or the kinds named: TorchScript
exporter at opset 17 and dynamo exporter, each static and with a dynamic
batch axis; ts_seq and dyn_seq, the text stacks with a dynamic batch and
sequence; ts_hw and dyn_hw, the image models with a dynamic batch, height
and width) with random weights, and beside each an .npz: the input x,
seeds v and w, and torch.func's J v, J^T w and Hessian-vector product
(d/dx <y, w> along v) of the float64 model (the float32 J v too: how far
torch's own float32 derivative is from float64 says whether kinks sit near
x; where torch has no forward AD, J v by central differences and no
Hessian). `check` differentiates each model in both
modes and the reverse model again in forward mode (layout onnx, one
direction), checks the derivative models with
ONNX's full checker, runs them in ONNX Runtime, and prints a table of
relative errors against torch's (each model in a child process: a crash is
a row, not the end of the sweep). The last run's table: RESULTS.md.
"""
from __future__ import annotations

import os
import subprocess
import sys

IMAGE = (2, 3, 64, 64)
TEXT = (1, 8, 64)  # the Hugging Face text stacks' inputs_embeds


def _models() -> dict:
    import torch
    import torchvision.models as tvm
    from torchvision.models import segmentation, video

    class Out(torch.nn.Module):
        """A segmentation model's "out" map."""
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)["out"]

    class ViTFeatures(torch.nn.Module):
        """The class token's features (torchvision zeroes the head's weights:
        a zero output has zero derivatives, which would check nothing)."""
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            x = self.m._process_input(x)
            x = torch.cat([self.m.class_token.expand(x.shape[0], -1, -1), x], dim=1)
            return self.m.encoder(x)[:, 0]

    models = {
        "resnet18": (tvm.resnet18, IMAGE),
        "mobilenet_v2": (tvm.mobilenet_v2, IMAGE),
        "mobilenet_v3_small": (tvm.mobilenet_v3_small, IMAGE),
        "efficientnet_b0": (tvm.efficientnet_b0, IMAGE),
        "regnet_y_400mf": (tvm.regnet_y_400mf, IMAGE),
        "shufflenet_v2_x0_5": (tvm.shufflenet_v2_x0_5, IMAGE),
        "squeezenet1_1": (tvm.squeezenet1_1, IMAGE),
        "googlenet": (lambda: tvm.googlenet(aux_logits=False, init_weights=True), IMAGE),
        "inception_v3": (lambda: tvm.inception_v3(aux_logits=False, init_weights=True),
                         (2, 3, 80, 80)),
        "mnasnet0_5": (tvm.mnasnet0_5, IMAGE),
        "densenet121": (tvm.densenet121, (2, 3, 32, 32)),
        "alexnet": (tvm.alexnet, IMAGE),
        "convnext_tiny": (tvm.convnext_tiny, IMAGE),
        "vit_b_16": (lambda: ViTFeatures(tvm.vit_b_16(image_size=32)), (2, 3, 32, 32)),
        "swin_t": (tvm.swin_t, IMAGE),
        "swin_v2_t": (tvm.swin_v2_t, IMAGE),
        "maxvit_t": (tvm.maxvit_t, (2, 3, 224, 224)),
        "r3d_18": (video.r3d_18, (1, 3, 4, 32, 32)),
        "lraspp": (lambda: Out(segmentation.lraspp_mobilenet_v3_large(weights_backbone=None)),
                   IMAGE),
        "deeplabv3_mobilenet": (lambda: Out(segmentation.deeplabv3_mobilenet_v3_large(
            weights_backbone=None, aux_loss=False)), IMAGE),
    }
    from op_modules import op_modules
    models.update(op_modules())
    try:
        import transformers
    except ImportError:
        return models

    class Hidden(torch.nn.Module):
        """A Hugging Face stack's last hidden state from a float input:
        embeddings, or pixels, audio or mel features (`key`)."""
        def __init__(self, m, key="inputs_embeds"):
            super().__init__()
            self.m, self.key = m, key

        def forward(self, x):
            return self.m(**{self.key: x}).last_hidden_state

    t = transformers
    # (Bloom's GeLU is an autograd.Function, which torch.func cannot
    # differentiate: its forward formula, the same function, stands in)
    bloom = t.models.bloom.modeling_bloom
    bloom.BloomGelu.forward = lambda self, x: bloom.bloom_gelu_forward(x)
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, attn_implementation="eager")
    seq2seq = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                   attn_implementation="eager")
    images = dict(image_size=32, patch_size=8)
    series = dict(num_input_channels=3, context_length=32, patch_length=8, patch_stride=8,
                  d_model=16)
    for name, (make, shape, key) in {
        "gpt2": (lambda: t.GPT2Model(t.GPT2Config(n_embd=64, n_layer=2, n_head=4,
                                                  attn_implementation="eager")), None, None),
        "bert": (lambda: t.BertModel(t.BertConfig(**small), add_pooling_layer=False), None,
                 None),
        "llama": (lambda: t.LlamaModel(t.LlamaConfig(**small, num_key_value_heads=2)), None,
                  None),
        "qwen2": (lambda: t.Qwen2Model(t.Qwen2Config(**small, num_key_value_heads=2)), None,
                  None),
        "t5_encoder": (lambda: t.T5EncoderModel(t.T5Config(d_model=64, d_kv=16, d_ff=128,
                                                           num_layers=2, num_heads=4)),
                       None, None),
        "mistral": (lambda: t.MistralModel(t.MistralConfig(
            **small, num_key_value_heads=2, sliding_window=4)), None, None),
        "gemma": (lambda: t.GemmaModel(t.GemmaConfig(**small, num_key_value_heads=2,
                                                     head_dim=16)), None, None),
        "phi": (lambda: t.PhiModel(t.PhiConfig(**small)), None, None),
        "gpt_neox": (lambda: t.GPTNeoXModel(t.GPTNeoXConfig(**small, rotary_pct=0.5)), None,
                     None),
        # rotary embeddings on interleaved pairs (x[..., ::2], x[..., 1::2])
        "gptj": (lambda: t.GPTJModel(t.GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                                  attn_implementation="eager")), None, None),
        "falcon": (lambda: t.FalconModel(t.FalconConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            attn_implementation="eager")), None, None),
        "bloom": (lambda: t.BloomModel(t.BloomConfig(hidden_size=64, n_layer=2, n_head=4,
                                                     attn_implementation="eager")), None, None),
        "deberta_v2": (lambda: t.DebertaV2Model(t.DebertaV2Config(
            **small, relative_attention=True, pos_att_type=["p2c", "c2p"],
            max_relative_positions=16)), None, None),
        "distilbert": (lambda: t.DistilBertModel(t.DistilBertConfig(
            dim=64, n_layers=2, n_heads=4, hidden_dim=128, attn_implementation="eager")),
            None, None),
        "bart_encoder": (lambda: t.BartModel(t.BartConfig(**seq2seq)).encoder, None, None),
        "mamba": (lambda: t.MambaModel(t.MambaConfig(
            hidden_size=64, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4,
            use_mambapy=False)), None, None),
        "vit_hf": (lambda: t.ViTModel(t.ViTConfig(**small, **images), add_pooling_layer=False),
                   (2, 3, 32, 32), "pixel_values"),
        "clip_vision": (lambda: t.CLIPVisionModel(t.CLIPVisionConfig(**small, **images)),
                        (2, 3, 32, 32), "pixel_values"),
        "segformer": (lambda: t.SegformerModel(t.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
            num_attention_heads=[1, 2], mlp_ratios=[2, 2], patch_sizes=[7, 3], strides=[4, 2])),
            (1, 3, 32, 32), "pixel_values"),
        "convnextv2": (lambda: t.ConvNextV2Model(t.ConvNextV2Config(
            hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)), (1, 3, 32, 32),
            "pixel_values"),
        "whisper_encoder": (lambda: t.WhisperModel(t.WhisperConfig(
            **seq2seq, num_mel_bins=16, max_source_positions=8)).encoder, (1, 16, 16),
            "input_features"),
        "wav2vec2": (lambda: t.Wav2Vec2Model(t.Wav2Vec2Config(
            **small, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)), (1, 400),
            "input_values"),
        "dinov2": (lambda: t.Dinov2Model(t.Dinov2Config(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            **images)), (1, 3, 32, 32), "pixel_values"),
        "swin_hf": (lambda: t.SwinModel(t.SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
            window_size=4)), (1, 3, 32, 32), "pixel_values"),
        "poolformer": (lambda: t.PoolFormerModel(t.PoolFormerConfig(
            depths=[1, 1], hidden_sizes=[16, 32], num_encoder_blocks=2, patch_sizes=[7, 3],
            strides=[4, 2], padding=[2, 1])), (1, 3, 32, 32), "pixel_values"),
        # time series: (batch, time, channels)
        "patchtst": (lambda: t.PatchTSTModel(t.PatchTSTConfig(**series, num_attention_heads=2,
                                                              num_hidden_layers=2, ffn_dim=32)),
                     (2, 32, 3), "past_values"),
        "patchtsmixer": (lambda: t.PatchTSMixerModel(t.PatchTSMixerConfig(**series,
                                                                          num_layers=2)),
                         (2, 32, 3), "past_values"),
    }.items():
        models[name] = (lambda make=make, key=key: Hidden(make(), key or "inputs_embeds"),
                        shape or TEXT)
    return models


KINDS = ("ts", "ts_batch", "dyn", "dyn_batch")
# the Hugging Face text stacks (input [batch, sequence, features]) also
# export with a run-time sequence: TorchScript's and dynamo's
SEQUENCE_KINDS = ("ts_seq", "dyn_seq")
# the image models (input IMAGE) also export with a run-time batch, height
# and width (dynamo's in multiples of 32)
IMAGE_KINDS = ("ts_hw", "dyn_hw")


def export(out: str, only: list[str] | None, kinds: tuple[str, ...] = KINDS) -> None:
    import numpy as np
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    os.makedirs(out, exist_ok=True)
    for name, (make, shape) in _models().items():
        if only and name not in only:
            continue
        for kind in kinds:
            if kind in SEQUENCE_KINDS and shape != TEXT or kind in IMAGE_KINDS and shape != IMAGE:
                continue
            torch.manual_seed(0)
            m = make().eval()
            x = torch.randn(*shape)
            path = os.path.join(out, f"{name}_{kind}.onnx")
            axes = {"ts_batch": {0: "batch"}, "ts_seq": {0: "batch", 1: "seq"},
                    "dyn_batch": {0: torch.export.Dim("batch", min=1, max=64)},
                    "dyn_seq": {0: torch.export.Dim("batch", min=1, max=64),
                                1: torch.export.Dim("seq", min=2, max=64)},
                    "ts_hw": {0: "batch", 2: "h", 3: "w"},
                    "dyn_hw": {0: torch.export.Dim("batch", min=1, max=64),
                               2: 32 * torch.export.Dim("h", min=1, max=8),
                               3: 32 * torch.export.Dim("w", min=1, max=8)}}.get(kind, {})
            try:
                if kind.startswith("ts"):  # (with grad: no_grad takes ViT to a fused kernel)
                    torch.onnx.export(m, (x,), path, dynamo=False, opset_version=17,
                                      input_names=["x"], output_names=["y"],
                                      dynamic_axes={"x": axes} if kind == "ts_hw" else
                                      {"x": axes, "y": axes})
                else:
                    batch = {"dynamic_shapes": {"x": axes}} if axes else {}
                    with torch.no_grad():  # (T5's export fails to decompose without)
                        torch.onnx.export(m, (x,), path, dynamo=True, input_names=["x"],
                                          output_names=["y"], external_data=False, **batch)
            except Exception as e:  # noqa: BLE001 - an exporter's failure is a row
                print(f"{name}_{kind}: export failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:160]}", flush=True)
                continue
            g = torch.Generator().manual_seed(1)
            v = torch.randn(*shape, generator=g, dtype=torch.float64)
            fd = False
            with sdpa_kernel([SDPBackend.MATH]):  # (the fused kernels have no forward AD)
                m.double()
                try:
                    y, jv = torch.func.jvp(m, (x.double(),), (v,))
                except NotImplementedError:
                    # no forward AD in torch (grid_sample, cdist, its CPU LSTM):
                    # J v by central differences in float64
                    fd = True
                    with torch.no_grad():
                        y = m(x.double())
                        jv = (m(x.double() + 1e-6 * v) - m(x.double() - 1e-6 * v)) / 2e-6
                w = torch.randn(*y.shape, generator=g, dtype=torch.float64)
                _, pull = torch.func.vjp(m, x.double())
                (jtw,) = pull(w)
                # the Hessian of <y, w> along v: d/dx (J^T w) . v; none where
                # torch has no derivative of a backward (hardsigmoid's)
                grad = lambda x_: torch.func.vjp(m, x_)[1](w)[0]  # noqa: E731
                try:
                    hvp = torch.func.jvp(grad, (x.double(),), (v,))[1].detach().numpy()
                except (NotImplementedError, RuntimeError):
                    hvp = np.zeros(0)
                m.float()
                try:
                    jv32 = jv if fd else torch.func.jvp(m, (x,), (v.float(),))[1]
                except NotImplementedError:  # (in float32 only: the CPU LSTM's kernel)
                    jv32 = torch.full_like(jv, float("nan"))
            np.savez(path[:-5] + ".npz", x=x.numpy(), v=v.numpy(), w=w.numpy(),
                     y=y.detach().numpy(), jv=jv.detach().numpy(), jtw=jtw.detach().numpy(),
                     jv32=jv32.detach().numpy(), hvp=hvp, fd=fd)
            print(f"{name}_{kind}: exported", flush=True)


def check_one(path: str) -> str:
    """One table row: node counts, transform times, relative errors."""
    import time

    import numpy as np
    import onnx
    import onnxruntime as ort

    from onnx_ad_mlir import forward, reverse

    def run(model, feeds):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        s = ort.InferenceSession(model.SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))

    def rel(a, b):
        return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))

    d = np.load(path[:-5] + ".npz")
    m = onnx.load(path)
    x, y = m.graph.input[0].name, m.graph.output[0].name
    fd = "fd" in d and bool(d["fd"])  # (J v by central differences: no float32 one)
    cells = [os.path.basename(path)[:-5], str(len(m.graph.node)),
             "(fd)" if fd else "-" if np.isnan(d["jv32"]).any() else
             f"{rel(d['jv32'], d['jv']):.1e}"]
    for kind, transform, seed, ref in (("fwd", forward, d["v"], d["jv"]),
                                       ("rev", reverse, d["w"], d["jtw"])):
        start = time.perf_counter()
        dm = transform(m, layout="onnx")
        seconds = time.perf_counter() - start
        onnx.checker.check_model(dm, full_check=True)
        seed_name, result = (f"fwd_{x}", f"fwd_{y}") if kind == "fwd" else (f"adj_{y}",
                                                                             f"adj_{x}")
        got = run(dm, {x: d["x"], seed_name: seed[..., None].astype(np.float32)})[result]
        cells += [str(len(dm.graph.node)), f"{seconds:.1f}", f"{rel(got[..., 0], ref):.1e}"]
        if kind == "rev":
            adjoint = dm
    if not d["hvp"].size:
        return "| " + " | ".join(cells + ["(torch cannot)"]) + " |"
    # second order: forward mode of the reverse model, along v in x
    hm = forward(adjoint, inputs=[x], layout="onnx")
    onnx.checker.check_model(hm, full_check=True)
    got = run(hm, {x: d["x"], f"adj_{y}": d["w"][..., None].astype(np.float32),
                   f"fwd_{x}": d["v"][..., None].astype(np.float32)})[f"fwd_adj_{x}"]
    got, ref = got.reshape(d["hvp"].shape), d["hvp"]
    # (piecewise-linear models: torch's is exactly 0, show how far ours is)
    cells.append(f"{rel(got, ref):.1e}" if np.any(ref) else f"abs {np.abs(got).max():.0e}")
    return "| " + " | ".join(cells) + " |"


def optimize(out: str, opt: str) -> None:
    """OPT/<model>.onnx: each model of OUT saved after ONNX Runtime's
    extended graph optimizations, beside a copy of its .npz."""
    import shutil

    import onnxruntime as ort

    os.makedirs(opt, exist_ok=True)
    for f in sorted(os.listdir(out)):
        if not f.endswith(".onnx"):
            continue
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = os.path.join(opt, f)
        try:
            ort.InferenceSession(os.path.join(out, f), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - an export ONNX Runtime refuses is a line
            print(f"{f[:-5]}: ONNX Runtime cannot load it: {str(e).splitlines()[0][:160]}",
                  flush=True)
            continue
        shutil.copy(os.path.join(out, f[:-5] + ".npz"), opt)
        print(f"{f[:-5]}: optimized", flush=True)


def check(out: str) -> int:
    print("| model | nodes | torch f32 | fwd nodes | fwd s | fwd err | rev nodes | rev s "
          "| rev err | hvp err |\n|---|---|---|---|---|---|---|---|---|---|")
    failed = 0
    for f in sorted(os.listdir(out)):
        if not f.endswith(".onnx") or not os.path.exists(os.path.join(out, f[:-5] + ".npz")):
            continue
        p = subprocess.run([sys.executable, __file__, "row", os.path.join(out, f)],
                           capture_output=True, text=True, timeout=1800)
        if p.returncode == 0:
            print(p.stdout.strip(), flush=True)
        else:
            failed += 1
            last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
            print(f"| {f[:-5]} | failed ({p.returncode}): {last[:200]} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    command, target = sys.argv[1], sys.argv[2]
    if command == "export":
        export(target, sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else None,
               tuple(sys.argv[4].split(",")) if len(sys.argv) > 4 else KINDS)
    elif command == "row":
        print(check_one(target))
    elif command == "optimize":
        optimize(target, sys.argv[3])
    else:
        sys.exit(check(target))
