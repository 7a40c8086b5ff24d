#!/usr/bin/python3
"""Runs the load code `runner export` printed, as a user on Debian 12 would: without the
safetensors package (an import of it fails here even where it is installed), and checks
the model it builds gives the same logits as the file's tensors read independently (numpy,
from the format's definition: 8-byte little-endian header length, JSON header, raw
little-endian data) and loaded into a copy of that model.

usage: check_printed_load.py FILE.safetensors SNIPPET.py [SNIPPET.py...] [--shim DIR]
Each SNIPPET is one block of the printed code (unindented); it must leave `model`. With
--shim DIR, the snippets run a second time with DIR (a stand-in safetensors package) on
sys.path, so the `from safetensors.torch import load_file` branch is taken too, and must
give the same logits.
Prints one line per snippet and run; exit 0 when all hold, 1 (an assertion) otherwise.
"""
import copy
import json
import struct
import sys

import numpy as np
import torch

NP = {"F32": "<f4", "I64": "<i8", "F16": "<f2"}


def numpy_state_dict(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        a = np.frombuffer(body[b:e], dtype=NP[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out, header["__metadata__"]


def run_snippet(code, shim):
    saved = dict(sys.modules)
    saved_path = list(sys.path)
    for k in [k for k in sys.modules if k == "safetensors" or k.startswith("safetensors.")
              or k == "torchvision_model"]:
        del sys.modules[k]
    if shim:
        sys.path.insert(0, shim)
    else:
        sys.modules["safetensors"] = None   # `import safetensors` raises ImportError
    ns = {}
    try:
        exec(compile(code, "<printed code>", "exec"), ns)
    finally:
        for k in [k for k in sys.modules if k not in saved]:
            del sys.modules[k]
        sys.modules.update(saved)
        sys.path[:] = saved_path
    return ns


def main():
    args = sys.argv[1:]
    shim = None
    if "--shim" in args:
        i = args.index("--shim")
        shim = args[i + 1]
        del args[i:i + 2]
    path, snippets = args[0], args[1:]
    sd, meta = numpy_state_dict(path)
    cin, side = int(meta["in_channels"]), int(meta["input_size"].split("x")[0])
    torch.manual_seed(0)
    x = torch.randn(3, cin, side, side)
    reference = None
    for s in snippets:
        code = open(s).read()
        for use_shim in ([None, shim] if shim else [None]):
            ns = run_snippet(code, use_shim)
            model = ns["model"]
            assert not model.training, "the printed code leaves the model in training mode"
            lf = ns.get("load_file")
            source = lf.__module__ if lf is not None else "torchvision_model.load"
            if lf is not None:
                want = "safetensors.torch" if use_shim else "torchvision_model"
                assert source == want, "load_file came from %s, expected %s" % (source, want)
            twin = copy.deepcopy(model)
            twin.load_state_dict(sd, strict=True)
            with torch.no_grad():
                y, y_ref = model(x), twin(x)
            assert torch.isfinite(y).all(), "non-finite logits"
            assert torch.equal(y, y_ref), "logits differ from the numpy-read weights by %g" % (
                (y - y_ref).abs().max().item())
            if reference is None:
                reference = y
            assert torch.equal(y, reference), "logits differ between the printed blocks"
            print("%s: %s, %d tensors via %s%s: logits %s equal to the numpy-read weights'"
                  % (s.rsplit("/", 1)[-1], meta["arch"], len(sd), source,
                     " (stand-in safetensors)" if use_shim else " (no safetensors package)",
                     "x".join(str(d) for d in y.shape)))


if __name__ == "__main__":
    main()
