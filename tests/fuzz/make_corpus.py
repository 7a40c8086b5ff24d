#!/usr/bin/python3
"""make_corpus.py RUNNER_EXE: writes the seed corpora of tests/fuzz/corpus/<reader>/ from real
files: a tiny CPU run of the runner (summary.json, plan.json, env.json, resolved.yaml, its
checkpoint, its `runner export`), the repository's experiment files and baseline, the
Fashion-MNIST files Debian installs, and the wire/HTTP formats as the tests produce them.
Large sections are cut down (a checkpoint keeps its real meta and 64 bytes of each array)
so the corpus stays small. Files named crash-* (regressions) are never touched.
Deterministic apart from the run's timings; rerun it when a format changes."""
import gzip, io, json, os, shutil, struct, subprocess, sys, tarfile, tempfile, zlib

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.abspath(os.path.join(here, "..", ".."))
corpus = os.path.join(here, "corpus")
runner = os.path.abspath(sys.argv[1])


def put(reader, name, data):
    d = os.path.join(corpus, reader)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clear():
    for r in os.listdir(corpus):
        for f in os.listdir(os.path.join(corpus, r)):
            if f.startswith("seed-"):
                os.remove(os.path.join(corpus, r, f))


TINY = """name: tiny
seed: 3
device: cpu
data:
  dataset: synthetic
  synthetic: {train_size: 32, val_size: 16, image: [3, 8, 8], classes: 4}
  workers: 1
model: {arch: resnet20}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}
schedule: {name: multistep, milestones: [1], gamma: 0.5, warmup_epochs: 0.5}
train: {epochs: 2, batch_size: 16}
parallel: {mode: single, world_size: 1}
logging: {print_every: 1}
checkpoint: {every_epochs: 1, keep_last: 2, resume: never}
"""

MATRIX = TINY.replace("name: tiny\n", "name: grid\n") + """matrix:
  - {name: a, optimizer.lr: 0.05}
  - {name: b, optimizer.lr: 0.1, train.batch_size: 8}
"""


def ckpt_sections(path):
    b = open(path, "rb").read()
    n = struct.unpack_from("<I", b, 12)[0]
    out = []
    for i in range(n):
        t = 32 + 64 * i
        name = b[t:t + 40].split(b"\0")[0].decode()
        off, size = struct.unpack_from("<QQ", b, t + 40)
        out.append((name, b[off:off + size]))
    return struct.unpack_from("<Q", b, 16)[0], out


def ckpt_build(cfg_hash, sections):
    n = len(sections)
    meta = 32 + 64 * n + 4
    head = bytearray(meta)
    head[0:8] = b"RNCKPT\r\n"
    struct.pack_into("<IIQQ", head, 8, 1, n, cfg_hash, 0)
    off = (meta + 63) // 64 * 64
    body = bytearray()
    for i, (name, data) in enumerate(sections):
        t = 32 + 64 * i
        head[t:t + len(name)] = name.encode()
        struct.pack_into("<QQI", head, t + 40, off, len(data), zlib.crc32(data))
        body += bytes(off - meta - len(body)) + data
        off = (off + len(data) + 63) // 64 * 64
    struct.pack_into("<I", head, meta - 4, zlib.crc32(bytes(head[:meta - 4])))
    return bytes(head) + bytes(body)


def safetensors_cut(path, keep):
    b = open(path, "rb").read()
    hl = struct.unpack_from("<Q", b, 0)[0]
    h = json.loads(b[8:8 + hl])
    data = b[8 + hl:]
    out, blob = {}, bytearray()
    if "__metadata__" in h:
        out["__metadata__"] = h["__metadata__"]
    names = [k for k in h if k != "__metadata__"][:keep]
    for k in names:
        s, e = h[k]["data_offsets"]
        out[k] = dict(h[k], data_offsets=[len(blob), len(blob) + e - s])
        blob += data[s:e]
    hj = json.dumps(out, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    return struct.pack("<Q", len(hj)) + hj + bytes(blob)


def small_tensor_file():
    h = {"__metadata__": {"format": "pt"},
         "fc.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
         "fc.bias": {"dtype": "F16", "shape": [2], "data_offsets": [16, 20]},
         "bn.num_batches_tracked": {"dtype": "I64", "shape": [], "data_offsets": [20, 28]},
         "x.bf16": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [28, 32]}}
    hj = json.dumps(h, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    data = struct.pack("<4f", 1, -2, 0.5, 3) + struct.pack("<2e", 1.5, -1) + struct.pack("<q", 7) + b"\x80\x3f\x00\xc0"
    return struct.pack("<Q", len(hj)) + hj + data


def store_req(op, key, val=b"", arg=0):
    k = key.encode()
    return struct.pack("<BH", op, len(k)) + k + struct.pack("<I", len(val)) + val + struct.pack("<q", arg)


def store_rep(st, data=b""):
    return struct.pack("<BI", st, len(data)) + data


def main():
    clear()
    tmp = tempfile.mkdtemp()
    try:
        exp = os.path.join(tmp, "tiny.yaml")
        open(exp, "w").write(TINY)
        subprocess.run([runner, exp, "--set", "output.root=" + tmp], check=True, stdout=subprocess.DEVNULL)
        run = os.path.join(tmp, "tiny", os.listdir(os.path.join(tmp, "tiny"))[0])
        st = os.path.join(tmp, "w.safetensors")
        subprocess.run([runner, "export", run, "--output", st], check=True, stdout=subprocess.DEVNULL)

        # json: the run's own files, the CI baseline, a checkpoint's meta
        for f in ("summary.json", "plan.json", "env.json"):
            put("json", f, open(os.path.join(run, f), "rb").read())
        put("json", "ci_smoke_baseline.json", open(os.path.join(src, "experiments/baselines/ci_smoke.json"), "rb").read())
        put("json", "baseline_bounds.json", '{"note": "x", "metrics": {"val_top1": {"min": 0.25}, "train_loss": {"max": 2.5, "min": 0}}}')
        put("json", "escapes.json", '["a\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00", -1.5e-300, 1e308, true, false, null, {}, []]')
        cfg_hash, secs = ckpt_sections(os.path.join(run, "checkpoints", "last.ckpt"))
        meta = dict(secs)["meta"]
        put("json", "ckpt_meta.json", meta)

        # config: real experiment files, the run's resolved.yaml, --set strings, a matrix
        for f in ("ci_smoke.yaml", "quickstart.yaml", "resnet50_cifar100.yaml", "compare_dp_ddp_amp.yaml"):
            put("config", f, open(os.path.join(src, "experiments", f), "rb").read())
        put("config", "resolved.yaml", open(os.path.join(run, "resolved.yaml"), "rb").read())
        put("config", "tiny_sets.yaml", TINY + "\0optimizer.lr=0.01\0parallel.world_size=1\0train.epochs=3")
        put("config", "matrix.yaml", MATRIX + "\0train.epochs=1")

        # checkpoint: the real meta and resolved.yaml, 64 bytes of each array (mode byte first)
        small = [(n, d if n in ("meta", "resolved.yaml") else d[:64]) for n, d in secs]
        img = ckpt_build(cfg_hash, small)
        put("checkpoint", "last_small.ckpt", b"\0" + img)
        put("checkpoint", "last_small_fixcrc.ckpt", b"\1" + img)

        # safetensors: the export cut to a few tensors, and one of every dtype
        put("safetensors", "export_cut.safetensors", safetensors_cut(st, 4))
        put("safetensors", "dtypes.safetensors", small_tensor_file())

        # cifar: two records of each variant (mode byte: 0 CIFAR-10, 1 CIFAR-100)
        px = bytes((i * 7) % 256 for i in range(3072))
        put("cifar", "cifar10.bin", b"\0" + bytes([3]) + px + bytes([9]) + px)
        put("cifar", "cifar100.bin", b"\1" + bytes([4, 42]) + px + bytes([19, 99]) + px)

        # fashion_mnist: the first 3 test images and labels Debian installs, plain and gzipped
        fm = "/usr/share/datasets/fashion-mnist"
        imgs = gzip.open(os.path.join(fm, "t10k-images-idx3-ubyte.gz")).read()
        labs = gzip.open(os.path.join(fm, "t10k-labels-idx1-ubyte.gz")).read()
        ii = struct.pack(">IIII", 0x803, 3, 28, 28) + imgs[16:16 + 3 * 784]
        ll = struct.pack(">II", 0x801, 3) + labs[8:11]
        put("fashion_mnist", "plain.idx", struct.pack("<H", len(ii)) + ii + ll)
        gi, gl = gzip.compress(ii, mtime=0), gzip.compress(ll, mtime=0)
        put("fashion_mnist", "gzip.idx", struct.pack("<H", len(gi)) + gi + gl)

        # tar: a CIFAR-like archive (ustar, gzipped), GNU long names, pax, a plain tar, a link
        def tarball(fmt, compress, long_name=False, link=False):
            bio = io.BytesIO()
            with tarfile.open(fileobj=bio, mode="w", format=fmt) as t:
                d = tarfile.TarInfo("cifar-10-batches-bin"); d.type = tarfile.DIRTYPE; d.mtime = 0
                t.addfile(d)
                for name, data in (("data_batch_1.bin", b"\3" + px), ("batches.meta.txt", b"cat\ndog\n")):
                    if long_name:
                        name = "x" * 120 + "_" + name
                    ti = tarfile.TarInfo("cifar-10-batches-bin/" + name); ti.size = len(data); ti.mtime = 0
                    t.addfile(ti, io.BytesIO(data))
                if link:
                    li = tarfile.TarInfo("cifar-10-batches-bin/evil"); li.type = tarfile.SYMTYPE
                    li.linkname = "/etc/passwd"; t.addfile(li)
            b = bio.getvalue()
            return gzip.compress(b, mtime=0) if compress else b
        put("tar", "ustar.tar.gz", b"\1" + tarball(tarfile.USTAR_FORMAT, True))
        put("tar", "ustar_download.tar.gz", b"\0" + tarball(tarfile.USTAR_FORMAT, True))
        put("tar", "gnu_long.tar", b"\1" + tarball(tarfile.GNU_FORMAT, False, long_name=True))
        put("tar", "pax_long.tar", b"\1" + tarball(tarfile.PAX_FORMAT, False, long_name=True))
        put("tar", "symlink.tar", b"\1" + tarball(tarfile.USTAR_FORMAT, False, link=True))

        # wandb: the answers of test_track_wandb's fake service (mode byte picks the reader)
        row = json.dumps({"_step": 7, "loss": 0.5})
        tail = json.dumps([row])
        put("wandb", "viewer.json", b"\0" + b'{"data":{"viewer":{"id":"v1","entity":"team"}}}')
        put("wandb", "resume.json", b"\1" + json.dumps({"data": {"model": {"id": "p1", "name": "proj", "entity": {"id": "e1", "name": "team"}, "bucket": {"id": "b1", "name": "x", "historyLineCount": 8, "logLineCount": 3, "eventsLineCount": 0, "historyTail": tail}}}}).encode())
        put("wandb", "upsert.json", b"\2" + b'{"data":{"upsertBucket":{"bucket":{"id":"b1","name":"x","displayName":"x","project":{"id":"p1","name":"proj","entity":{"id":"e1","name":"team"}}},"inserted":true}}}')
        put("wandb", "upsert_error.json", b"\2" + b'{"errors":[{"message":"boom"}]}')
        put("wandb", "retry_after.txt", b"\3" + b"Retry-After: 2\r\n")
        put("wandb", "netrc.txt", b"\4" + b'machine other.host login x password nope\nmachine api.wandb.ai\n  login user\n  password "0123456789abcdef"\ndefault login d password dflt\n')

        # csv: the run's metrics.csv and steps.csv, for the report reader (mode 0) and the
        # resume scan (mode 1 + step 2 * 2), and one cut in the middle of a row
        for f in ("metrics.csv", "steps.csv"):
            b = open(os.path.join(run, f), "rb").read()
            put("csv", f, b"\0" + b)
            put("csv", "resume_" + f, bytes([1 + 2 * 4]) + b)
        m = open(os.path.join(run, "metrics.csv"), "rb").read()
        put("csv", "torn_metrics.csv", b"\3" + m[:len(m) - 7])

        # image: small JPEG and PNG files of every kind the image_folder decoders handle
        # (Pillow; fuzz_image.c is built once data/image.h exists). Prefix: RGB, scale
        # 8/8, the whole image.
        try:
            from PIL import Image
        except ImportError:
            Image = None
        if Image is not None:
            rgb = Image.frombytes("RGB", (12, 9), bytes((i * 37) % 256 for i in range(12 * 9 * 3)))
            whole = bytes([0xE, 0, 0, 255, 255])
            def img(name, im, fmt, **kw):
                b = io.BytesIO()
                im.save(b, fmt, **kw)
                put("image", name, whole + b.getvalue())
            img("rgb.jpg", rgb, "JPEG", quality=80)
            img("progressive.jpg", rgb, "JPEG", quality=60, progressive=True)
            img("gray.jpg", rgb.convert("L"), "JPEG")
            img("cmyk.jpg", rgb.convert("CMYK"), "JPEG")
            img("rgb.png", rgb, "PNG")
            img("palette.png", rgb.convert("P"), "PNG")
            img("gray16.png", rgb.convert("L").convert("I").point(lambda v: v * 257), "PNG")
            img("rgba.png", rgb.convert("RGBA"), "PNG")
            img("bilevel.png", rgb.convert("1"), "PNG")

        # store: a rank's requests (mode 0) and a server's answers (mode 1), per store.c
        hello = struct.pack("<QiI", 42, 1, 2)
        reqs = (store_req(8, "runner-store/1", hello) + store_req(1, "shm/0", b"/runner-shm-abc") +
                store_req(2, "shm/0", arg=100) + store_req(5, "barrier/start/1", arg=1) +
                store_req(4, "shm/0") + store_req(3, "missing", arg=5) +
                store_req(6, "fail", b"rank 1 out of memory", arg=1) + store_req(7, "fail"))
        put("store", "rank_requests.bin", b"\0" + reqs)
        put("store", "bad_world.bin", b"\0" + store_req(8, "runner-store/1", struct.pack("<QiI", 42, 3, 4)))
        put("store", "other_job.bin", b"\0" + store_req(8, "runner-store/1", struct.pack("<QiI", 7, 0, 2)))
        put("store", "http.bin", b"\0GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reps = (store_rep(0) + store_rep(0) + store_rep(0, b"v") + store_rep(0, struct.pack("<q", 1)) +
                store_rep(0) + store_rep(0) + store_rep(0) + store_rep(0, struct.pack("<q", 2)) +
                store_rep(0) + store_rep(0) + store_rep(2, struct.pack("<i", 1) + b"rank 1 failed"))
        put("store", "server_answers.bin", b"\1" + reps)
        put("store", "refused.bin", b"\1" + store_rep(5, b"this port belongs to job 0000000000000007"))
    finally:
        shutil.rmtree(tmp)


main()
