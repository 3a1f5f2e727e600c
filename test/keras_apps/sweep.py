"""keras.applications architectures, exported by tf2onnx and differentiated,
against TensorFlow's own derivatives of a float64 twin. Not part of the test
suite (TensorFlow and tf2onnx are not project dependencies); run it after
changing the importer or the rules:

    # 1. in an environment with TensorFlow, Keras 3 and tf2onnx
    #    (python3 -m venv /opt/tfenv && /opt/tfenv/bin/pip install tensorflow
    #    tf2onnx onnxruntime; tested with tensorflow 2.21.0, keras 3.15,
    #    tf2onnx 1.17.0):
    /opt/tfenv/bin/python test/keras_apps/sweep.py export WORK [model,...]
    # 2. in the project's environment:
    python test/keras_apps/sweep.py check WORK [model,...]
    # or both at once from the project's environment:
    python test/keras_apps/sweep.py all WORK --tf /opt/tfenv/bin/python

`export` builds each model with weights=None (no download) at a small input
(32x32 where the architecture allows; ResNet50V2 64, Xception 71, InceptionV3
and InceptionResNetV2 75), batch 1, 10 classes with logits out, twice: in
float32 (exported by tf2onnx.convert.from_keras at opset 17 with static
shapes) and as a float64 twin holding the same weights
(keras.backend.set_floatx + keras.config.set_dtype_policy before building).
Keras' initializers are kept where they are random; weights with a constant
initial value (biases, BatchNormalization's beta/gamma and moving
statistics, ConvNeXt's 1e-6 layer scales, Normalization's mean/variance) are
drawn at random, float32-exact, so that they take part. ConvNeXt needs two
rewrites for tf2onnx (`_exportable`). WORK/<model>.npz holds the input x,
seeds u (output) and v (input), the twin's y, J v
(tf.autodiff.ForwardAccumulator; central differences of the twin if that
fails), J^T u (tf.GradientTape output_gradients), TensorFlow's own float32
y and J v (how far they are from float64 says whether kinks sit near x), and
the Hessian-vector product d/dx <u, y> along v where MODELS asks for one
(central differences of the twin's float64 gradient, Richardson-extrapolated,
h = 1e-3, error O(h^4); or TensorFlow's forward-over-reverse);
WORK/<model>.json the export's notes. A float64 twin that fails to build
falls back to TensorFlow's float32 references (noted there).

`check` runs the exported model in ONNX Runtime (1 thread) against the twin
(the export's own error), differentiates it with forward(layout="onnx") and
reverse(layout="onnx") (and forward(reverse) for the Hessian-vector
product), checks each derivative model with ONNX's full checker, runs it,
and prints a Markdown table: node counts, transform times, relative errors
max|got - ref| / max|ref|, and run-time ratios to the primal (medians of 10
interleaved runs). Each model runs in a child process with a timeout: a
crash is a row, not the end of the sweep. The last run's table: RESULTS.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
TIMEOUT = 900  # s, per model and phase

# name: (keras.applications constructor, image side, input range, Hessian check)
# input range: the models that rescale inside (include_preprocessing) take
# pixels in [0, 255], the others about [-1, 1]. Hessian check (d/dx <u, y>
# along v): "fd" for the smooth models (swish, GELU): central differences of
# the twin's float64 gradient; "tf" for the piecewise-smooth ones (hard
# swish: differences would jump at its kinks): TensorFlow's forward-over-
# reverse (a ForwardAccumulator around a GradientTape, float64; not for
# LayerNormalization, whose tf.nn.moments stops the mean's gradient, which
# makes TensorFlow's second derivatives wrong); "zero" for the piecewise-
# linear ones (ReLU, max pooling): the Hessian is 0 almost everywhere, and so
# must ours be.
MODELS = {
    "MobileNet": ("MobileNet", 32, 1.0, "zero"),
    "MobileNetV2": ("MobileNetV2", 32, 1.0, "zero"),
    "MobileNetV3Small": ("MobileNetV3Small", 32, 255.0, "tf"),
    "MobileNetV3Large": ("MobileNetV3Large", 32, 255.0, "tf"),
    "ResNet50": ("ResNet50", 32, 1.0, "zero"),
    # (at 32x32 conv5 is 1x1: tf2onnx folds the residual Add into the
    # shortcut's biased Conv, a Conv with 4 inputs that ONNX Runtime refuses)
    "ResNet50V2": ("ResNet50V2", 64, 1.0, "zero"),
    "DenseNet121": ("DenseNet121", 32, 1.0, "zero"),
    "EfficientNetB0": ("EfficientNetB0", 32, 255.0, "fd"),
    "EfficientNetV2B0": ("EfficientNetV2B0", 32, 255.0, "fd"),
    "NASNetMobile": ("NASNetMobile", 32, 1.0, "zero"),
    "ConvNeXtTiny": ("ConvNeXtTiny", 32, 255.0, "fd"),
    "Xception": ("Xception", 71, 1.0, "zero"),
    "InceptionV3": ("InceptionV3", 75, 1.0, "zero"),
    "InceptionResNetV2": ("InceptionResNetV2", 75, 1.0, "zero"),
    "VGG16": ("VGG16", 32, 1.0, "zero"),
}


# --------------------------------------------------------------- export (TF)

def _tf_setup():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # test/fixtures/jax would shadow the jax package keras probes for, if a
    # caller put test/fixtures on sys.path; this directory holds no package.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _set_floatx(keras, floatx: str) -> None:
    keras.backend.set_floatx(floatx)
    keras.config.set_dtype_policy(floatx)


def _weights(model, seed: int) -> list:
    """Keras' random initial values, constant ones replaced by random ones
    (float32-exact): variances in [0.5, 1.5], values initialised to a
    nonzero constant (BatchNormalization's gamma, layer scales) in
    [0.5, 1.5], zeros (biases, betas, moving means) N(0, 0.1^2)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for var in model.weights:
        w = np.asarray(var.numpy())
        if w.dtype.kind == "f" and w.size and np.all(w == w.flat[0]):
            if "variance" in var.path or w.flat[0] != 0:
                w = rng.uniform(0.5, 1.5, w.shape)
            else:
                w = rng.standard_normal(w.shape) * 0.1
        out.append(w.astype(np.float32) if w.dtype.kind == "f" else w)
    return out


def _set_weights(model, weights) -> None:
    """set_weights, then the layers' derived constants (Normalization's mean
    and variance tensors, which set_weights alone leaves at their initial
    values) recomputed."""
    model.set_weights(weights)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if hasattr(layer, "finalize_state"):
            layer.finalize_state()


def _exportable(keras, tf, used: set):
    """A context in which Keras' TensorFlow backend writes two functions in
    forms tf2onnx converts, for ConvNeXt (same math; the export's primal
    error against the twin, which keeps Keras' own forms, checks them):
    a grouped convolution with one input channel per group (its depthwise
    Conv2D(groups=channels)) with tf.nn.depthwise_conv2d, where Keras calls
    a tf.function(jit_compile=True) that tf2onnx leaves as an unconverted
    StatefulPartitionedCall node; the exact GELU as 0.5 x (1 + erf(x/sqrt2)),
    where tf.nn.gelu's Erfc stays an Erfc node (no such ONNX op). `used`
    collects the rewrites taken."""
    import contextlib

    from keras.src.backend import standardize_data_format
    from keras.src.backend.tensorflow import nn as tf_nn

    original, original_gelu = tf_nn.conv, tf_nn.gelu

    def conv(inputs, kernel, strides=1, padding="valid", data_format=None, dilation_rate=1):
        fmt = standardize_data_format(data_format)
        if (fmt == "channels_last" and len(inputs.shape) == 4 and kernel.shape[-2] == 1
                and kernel.shape[-1] == inputs.shape[-1] != 1
                and strides in (1, (1, 1), [1, 1]) and dilation_rate in (1, (1, 1), [1, 1])):
            used.add("depthwise conv")
            filt = tf.reshape(kernel, tuple(kernel.shape[:2]) + (kernel.shape[-1], 1))
            return tf.nn.depthwise_conv2d(inputs, filt, (1, 1, 1, 1), padding.upper())
        return original(inputs, kernel, strides, padding, data_format, dilation_rate)

    def gelu(x, approximate=True):
        if approximate:
            return original_gelu(x, approximate)
        used.add("erf GELU")
        x = tf.convert_to_tensor(x)
        return 0.5 * x * (1.0 + tf.math.erf(x * (2.0 ** -0.5)))

    @contextlib.contextmanager
    def patched():
        tf_nn.conv, tf_nn.gelu = conv, gelu
        try:
            yield
        finally:
            tf_nn.conv, tf_nn.gelu = original, original_gelu
    return patched()


def export_one(name: str, work: str) -> None:
    import numpy as np
    tf = _tf_setup()
    import keras
    import onnx
    import tf2onnx

    ctor_name, side, scale, hvp_kind = MODELS[name]
    ctor = getattr(keras.applications, ctor_name)
    notes = {"name": name, "side": side}
    seed = zlib.crc32(name.encode()) % 10000  # (stable when models are added)
    for ext in ("onnx", "npz", "json"):  # no stale files of an earlier run
        if os.path.exists(os.path.join(work, f"{name}.{ext}")):
            os.remove(os.path.join(work, f"{name}.{ext}"))

    def build(floatx):
        _set_floatx(keras, floatx)
        keras.utils.set_random_seed(seed)
        return ctor(weights=None, input_shape=(side, side, 3), classes=10,
                    classifier_activation=None)

    net = build("float32")
    weights = _weights(net, seed)
    _set_weights(net, weights)
    ref_dtype = "float64"
    try:
        twin = build("float64")
        _set_weights(twin, weights)
        twin(tf.zeros((1, side, side, 3), tf.float64), training=False)
    except Exception as e:  # noqa: BLE001 - a layer without float64: TF's float32
        notes["twin"] = f"float64 twin failed ({type(e).__name__}: {str(e)[:200]}); " \
                        "float32 references"
        twin, ref_dtype = net, "float32"
    notes["ref_dtype"] = ref_dtype
    rdt = tf.as_dtype(ref_dtype)

    rng = np.random.default_rng(1000 + seed)
    shape = (1, side, side, 3)
    lo = 0.0 if scale > 1 else -scale
    x = rng.uniform(lo, scale, shape).astype(np.float32)
    v = rng.standard_normal(shape)
    if scale > 1:
        v *= scale / 10  # tangents on the inputs' scale

    def call(model, floatx):
        def f(a):
            _set_floatx(keras, floatx)
            return model(a, training=False)
        return f

    f32, f64 = call(net, "float32"), call(twin, ref_dtype)

    # the export (float32, static shapes). from_keras: from_function would
    # make the tensors the model captures (Normalization's mean and variance)
    # graph inputs.
    start = time.perf_counter()
    spec = (tf.TensorSpec(shape, tf.float32, name="x"),)
    try:
        _set_floatx(keras, "float32")
        used: set = set()
        with _exportable(keras, tf, used):
            model, _ = tf2onnx.convert.from_keras(net, input_signature=spec, opset=OPSET)
        notes["rewritten"] = sorted(used)
    except Exception as e:  # noqa: BLE001 - tf2onnx's failure is a row
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [""]
        line = next((ln for ln in lines if "Error" in ln or "error" in ln), lines[0])
        notes["export_error"] = f"{type(e).__name__}: {line[:300]}"
        with open(os.path.join(work, f"{name}.json"), "w") as fh:
            json.dump(notes, fh, indent=1)
        print(f"{name}: export failed: {notes['export_error']}", flush=True)
        return
    notes["export_s"] = round(time.perf_counter() - start, 1)
    onnx.save(model, os.path.join(work, f"{name}.onnx"))

    # references
    start = time.perf_counter()
    xr = tf.constant(x.astype(ref_dtype))
    vr = tf.constant(v.astype(ref_dtype))
    with tf.GradientTape() as tape:
        tape.watch(xr)
        y = f64(xr)
    u = rng.standard_normal(tuple(y.shape))
    jtu = tape.gradient(y, xr, output_gradients=tf.constant(u, rdt)).numpy()
    try:
        with tf.autodiff.ForwardAccumulator(xr, vr) as acc:
            yy = f64(xr)
        jv = acc.jvp(yy).numpy()
        notes["jvp"] = "ForwardAccumulator"
    except Exception as e:  # noqa: BLE001
        def diff(h):
            return (f64(xr + h * vr).numpy() - f64(xr - h * vr).numpy()) / (2 * h)
        jv = (4 * diff(5e-4) - diff(1e-3)) / 3
        notes["jvp"] = f"central differences (ForwardAccumulator: {type(e).__name__})"
    # TensorFlow's own float32 (the kink measure)
    x32, v32 = tf.constant(x), tf.constant(v.astype(np.float32))
    with tf.autodiff.ForwardAccumulator(x32, v32) as acc:
        y32 = f32(x32)
    jv32 = acc.jvp(y32).numpy()
    data = dict(x=x, u=u, v=v, y=y.numpy(), jv=jv, jtu=jtu, y32=y32.numpy(), jv32=jv32)
    ut = tf.constant(u, rdt)
    if hvp_kind == "tf":
        try:
            with tf.autodiff.ForwardAccumulator(xr, vr) as acc:
                with tf.GradientTape() as t:
                    t.watch(xr)
                    s = tf.reduce_sum(ut * f64(xr))
                g = t.gradient(s, xr)
            data["hvp"] = acc.jvp(g).numpy()
        except Exception as e:  # noqa: BLE001 - no second derivative in TF: none
            notes["hvp_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            hvp_kind = None
    if hvp_kind == "fd":
        def gradient(a):
            with tf.GradientTape() as t:
                t.watch(a)
                s = tf.reduce_sum(ut * f64(a))
            return t.gradient(s, a).numpy()

        def difference(h):
            return (gradient(xr + h * vr) - gradient(xr - h * vr)) / (2 * h)
        h = 1e-3
        coarse, fine = difference(h), difference(h / 2)
        data["hvp"] = (4 * fine - coarse) / 3
        data["hvp_richardson_gap"] = np.abs(fine - coarse).max() / np.abs(fine).max()
    notes["hvp"] = hvp_kind
    notes["ref_s"] = round(time.perf_counter() - start, 1)
    notes["y_max"] = float(np.abs(data["y"]).max())
    np.savez(os.path.join(work, f"{name}.npz"), **data)
    with open(os.path.join(work, f"{name}.json"), "w") as fh:
        json.dump(notes, fh, indent=1)
    print(f"{name}: exported, {len(model.graph.node)} nodes, export {notes['export_s']} s, "
          f"references {notes['ref_s']} s ({ref_dtype}, J v by {notes['jvp']})", flush=True)


# ---------------------------------------------------------- check (project)

def _rel(got, ref) -> float:
    import numpy as np
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-300))


def check_one(name: str, work: str) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort

    from onnx_ad_mlir import forward, reverse

    d = dict(np.load(os.path.join(work, f"{name}.npz")))
    m = onnx.load(os.path.join(work, f"{name}.onnx"))
    x, y = m.graph.input[0].name, m.graph.output[0].name
    notes = json.load(open(os.path.join(work, f"{name}.json")))
    side = notes.get("side", 32)
    row = {"model": name + (f" ({side}x{side})" if side != 32 else ""), "p": len(m.graph.node),
           "export": "ok" + (f" (rewritten: {', '.join(notes['rewritten'])})"
                             if notes.get("rewritten") else "")}

    def session(model):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        return ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])

    f32 = np.float32
    xs = d["x"].astype(f32)
    try:  # the export's own problems are not the product's
        assert len(m.graph.input) == 1, f"graph inputs {[i.name for i in m.graph.input]}"
        primal = session(m)
        feeds = {"primal": {x: xs}}
        got = primal.run([y], feeds["primal"])[0]
    except Exception as e:  # noqa: BLE001
        return {**row, "error": f"export: the primal fails in ONNX Runtime: "
                                f"{type(e).__name__}: {str(e)[:200]}"}
    row["primal"] = _rel(got, d["y"])          # tf2onnx + float32 against the twin
    row["primal_keras32"] = _rel(got, d["y32"])  # against Keras' own float32
    row["tf32"] = _rel(d["jv32"], d["jv"])
    sessions = {"primal": primal}
    models = {}
    for kind, transform, seed_in, result, seed, ref in (
            ("fwd", forward, f"fwd_{x}", f"fwd_{y}", d["v"], d["jv"]),
            ("rev", reverse, f"adj_{y}", f"adj_{x}", d["u"], d["jtu"])):
        start = time.perf_counter()
        dm = transform(m, layout="onnx")
        row[f"{kind}_s"] = time.perf_counter() - start
        row[kind[0]] = len(dm.graph.node)
        onnx.checker.check_model(dm, full_check=True)
        models[kind] = dm
        sessions[kind] = s = session(dm)
        feeds[kind] = {x: xs, seed_in: seed[..., None].astype(f32)}
        got = s.run([result], feeds[kind])[0]
        row[f"{kind}_err"] = _rel(got[..., 0], ref)
    # run times: medians of interleaved runs (after one warm-up each, above)
    times = {k: [] for k in sessions}
    for _ in range(10):
        for k, s in sessions.items():
            start = time.perf_counter()
            s.run(None, feeds[k])
            times[k].append(time.perf_counter() - start)
    med = {k: float(np.median(t)) for k, t in times.items()}
    row["primal_ms"] = med["primal"] * 1e3
    row["fwd_ratio"], row["rev_ratio"] = med["fwd"] / med["primal"], med["rev"] / med["primal"]
    kind = notes.get("hvp")
    if kind:
        start = time.perf_counter()
        adj = reverse(m, outputs=[y], layout="onnx")
        hm = forward(adj, inputs=[x], outputs=[f"adj_{x}"], layout="onnx")
        row["hvp_s"] = time.perf_counter() - start
        row["h"] = len(hm.graph.node)
        onnx.checker.check_model(hm, full_check=True)
        got = session(hm).run([f"fwd_adj_{x}"], {
            x: xs, f"adj_{y}": d["u"][..., None].astype(f32),
            f"fwd_{x}": d["v"][..., None].astype(f32)})[0][..., 0, 0]
        if kind in ("fd", "tf"):
            row["hvp_err"], row["hvp_ref"] = _rel(got, d["hvp"]), kind
        else:  # piecewise linear: the exact Hessian is 0
            row["hvp_abs"] = float(np.abs(got).max())
    return row


def _fmt(row: dict) -> str:
    if "error" in row:
        return f"| {row['model']} | {row['error']} |"
    hvp = (f"{row['hvp_err']:.1e} ({row['hvp_ref']})" if "hvp_err" in row else
           f"abs {row['hvp_abs']:.0e}" if "hvp_abs" in row else "-")
    transform = f"{row['fwd_s']:.1f} / {row['rev_s']:.1f}" + \
        (f" / {row['hvp_s']:.1f}" if "hvp_s" in row else "")
    nodes = f"{row['p']} / {row['f']} / {row['r']}" + (f" / {row['h']}" if "h" in row else "")
    return (f"| {row['model']} | {row['export']} | {nodes} | {row['primal']:.1e} "
            f"| {row['tf32']:.1e} | {row['fwd_err']:.1e} | {row['rev_err']:.1e} | {hvp} "
            f"| {row['primal_ms']:.1f} | {row['fwd_ratio']:.2f} | {row['rev_ratio']:.2f} "
            f"| {transform} |")


HEADER = ("| model | export | nodes p / f / r (/ hvp) | primal err | tf f32 | fwd err | rev err "
          "| hvp err | primal ms | fwd/primal | rev/primal | transform s f / r (/ hvp) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")


def _children(command: str, work: str, names: list[str], python: str) -> int:
    failed = 0
    for name in names:
        start = time.perf_counter()
        try:
            p = subprocess.run([python, os.path.abspath(__file__), command, work, name],
                               capture_output=True, text=True, timeout=TIMEOUT)
            code, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            code, out, err = "timeout", "", f"timeout after {TIMEOUT} s"
        seconds = time.perf_counter() - start
        if command == "export_one":
            if code == 0:
                print(out.strip().splitlines()[-1] + f" [{seconds:.0f} s]", flush=True)
            else:
                failed += 1
                last = (err.strip().splitlines() or ["(no output)"])[-1]
                print(f"{name}: export crashed ({code}): {last[:300]}", flush=True)
                with open(os.path.join(work, f"{name}.json"), "w") as fh:
                    json.dump({"name": name, "export_error": f"crashed ({code}): {last[:300]}"},
                              fh)
        else:
            if code == 0:
                row = json.loads(out.strip().splitlines()[-1])
                print(_fmt(row), flush=True)
            else:
                failed += 1
                last = (err.strip().splitlines() or ["(no output)"])[-1]
                print(f"| {name} | ok | check failed ({code}): {last[:300]} "
                      f"(traceback: {os.path.join(work, name + '.err')}) |", flush=True)
                with open(os.path.join(work, f"{name}.err"), "w") as fh:
                    fh.write(err)
    return failed


def export(work: str, names: list[str]) -> int:
    os.makedirs(work, exist_ok=True)
    return _children("export_one", work, names, sys.executable)


def check(work: str, names: list[str]) -> int:
    print(HEADER, flush=True)
    runnable = []
    for name in names:
        notes_path = os.path.join(work, f"{name}.json")
        notes = json.load(open(notes_path)) if os.path.exists(notes_path) else {}
        if not os.path.exists(os.path.join(work, f"{name}.npz")):
            print(f"| {name} | failed: {notes.get('export_error', 'not exported')} |", flush=True)
        else:
            runnable.append(name)
    return _children("check_one", work, runnable, sys.executable)


if __name__ == "__main__":
    args = sys.argv[1:]
    tf_python = "/opt/tfenv/bin/python"
    if "--tf" in args:
        i = args.index("--tf")
        tf_python = args[i + 1]
        del args[i:i + 2]
    command, work = args[0], args[1]
    names = args[2].split(",") if len(args) > 2 else list(MODELS)
    if command == "export":
        sys.exit(1 if export(work, names) else 0)
    elif command == "export_one":
        export_one(names[0], work)
    elif command == "check":
        sys.exit(1 if check(work, names) else 0)
    elif command == "check_one":
        print(json.dumps(check_one(names[0], work)))
    elif command == "all":
        os.makedirs(work, exist_ok=True)
        subprocess.run([tf_python, os.path.abspath(__file__), "export", work, ",".join(names)])
        sys.exit(1 if check(work, names) else 0)
    else:
        sys.exit(f"unknown command {command}")
