#!/usr/bin/env python3
"""Proves the --weights checkpoint path of scripts/serve.py on small synthetic checkpoints.

Runs on the CPU or a GPU (--device); needs PyTorch only (the `safetensors`
package, when installed, is compared with the built-in reader). It writes
one-block checkpoints under --work and checks that:
  - a checkpoint written from seed S loads to parameters bit-identical to the
    synthetic ones of seed S, also when split over two files, and serve.py
    decodes it to the same SHA-256 as --seed S;
  - a missing tensor, a wrong shape, a non-float dtype and a file that is not
    safetensors are refused with a message naming the problem, and serve.py
    exits with status 2 and a one-line "checkpoint does not match" error.
Prints one JSON document; exit status 0 when every check holds, else 1.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))

import torch  # noqa: E402

import h3_vae  # noqa: E402

SERVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "serve.py")
SEED = 7
LATENT = "1,24,7,2,2"


def params_equal(model, other):
    theirs = dict(other.named_parameters())
    return all(torch.equal(p.view(torch.int32), theirs[name].view(torch.int32)) for name, p in model.named_parameters())


def write_variant(directory, tensors, files=1):
    """Writes `tensors` into `directory` as `files` safetensors shards; returns the directory."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    names = list(tensors)
    per = -(-len(names) // files)
    for i in range(files):
        part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
        h3_vae.write_safetensors(os.path.join(directory, f"part-{i}.safetensors"), part)
    return directory


def patch_dtype(path, name, dtype):
    """Rewrites the header dtype of one tensor in place (same length, so offsets stay valid)."""
    with open(path, "r+b") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        header[name]["dtype"] = dtype
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (size - len(text))
        assert len(text) == size
        f.seek(8)
        f.write(text)


def expect_error(location, device, *needles):
    """Loads `location` and returns (ok, message): ok when CheckpointError names every needle."""
    try:
        h3_vae.build_model(1, SEED, device, location)
    except h3_vae.CheckpointError as e:
        return all(n in str(e) for n in needles), str(e)
    return False, "loaded without error"


def serve(device, *args):
    r = subprocess.run([sys.executable, SERVE, "--device", device, "--latent", LATENT, "--blocks", "1",
                        "--requests", "1", "--warmup", "0", "--json", *args], capture_output=True, text=True)
    doc = None
    if r.returncode == 0:
        doc = json.loads(r.stdout)
    return r.returncode, doc, r.stderr.strip()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--work", required=True, help="scratch directory (about 1.5 GB is written)")
    args = p.parse_args()
    device = torch.device(args.device)
    checks = {}

    def record(name, ok, detail=""):
        checks[name] = {"ok": bool(ok), "detail": detail}

    reference = h3_vae.build_model(1, SEED, device)
    tensors = {name: p.detach().cpu() for name, p in reference.named_parameters()}
    good = write_variant(os.path.join(args.work, "good"), {**tensors, "encoder.unused": torch.zeros(3)})
    record("round_trip", params_equal(reference, h3_vae.build_model(1, 0, device, good)))
    sharded = write_variant(os.path.join(args.work, "sharded"), tensors, files=2)
    record("sharded", params_equal(reference, h3_vae.build_model(1, 0, device, sharded)))

    package, builtin = h3_vae.SafetensorsReader(good), h3_vae.SafetensorsReader(good, use_package=False)
    if package.package is None:
        record("readers_agree", True, "safetensors package not installed: built-in reader only")
    else:
        record("readers_agree", all(torch.equal(package.get(n), builtin.get(n)) for n in tensors),
               "safetensors package and built-in reader")

    missing_name = "decoder.blocks.0.ff.w2.bias"
    missing = write_variant(os.path.join(args.work, "missing"), {k: v for k, v in tensors.items() if k != missing_name})
    record("missing_tensor", *expect_error(missing, device, missing_name, "lacks"))
    shape_name = "decoder.blocks.0.ff.w2.weight"
    shape = write_variant(os.path.join(args.work, "shape"),
                          {**tensors, shape_name: tensors[shape_name].reshape(8192, 2048)})
    record("wrong_shape", *expect_error(shape, device, shape_name, "[8192, 2048]", "[2048, 8192]"))
    dtype_name = "decoder.blocks.0.scale1"
    dtype = write_variant(os.path.join(args.work, "dtype"), tensors)
    patch_dtype(os.path.join(dtype, "part-0.safetensors"), dtype_name, "I32")
    record("wrong_dtype", *expect_error(dtype, device, dtype_name, "I32"))
    garbage = os.path.join(args.work, "garbage.safetensors")
    with open(garbage, "wb") as f:
        f.write(struct.pack("<Q", 5) + b"nope!")
    record("not_safetensors", *expect_error(garbage, device, "not a safetensors file"))

    rc, doc, err = serve(args.device, "--weights", good, "--seed", str(SEED))
    rc_seed, doc_seed, err_seed = serve(args.device, "--seed", str(SEED))
    same = rc == 0 and rc_seed == 0 and doc["requests"][0]["sha256_fp32"] == doc_seed["requests"][0]["sha256_fp32"]
    record("serve_weights_equal_seed", same, f"rc {rc}/{rc_seed}; {err or err_seed}"[-500:])
    rc, _, err = serve(args.device, "--weights", missing)
    record("serve_refuses_missing", rc == 2 and "checkpoint does not match" in err and missing_name in err, err[-500:])
    rc, _, err = serve(args.device, "--weights", os.path.join(args.work, "no-such-dir"))
    record("serve_refuses_absent", rc == 2 and "no such checkpoint" in err, err[-500:])

    ok = all(c["ok"] for c in checks.values())
    print(json.dumps({"ok": ok, "device": args.device, "checks": checks}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
