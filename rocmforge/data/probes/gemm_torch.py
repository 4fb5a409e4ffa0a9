#!/usr/bin/env python3
"""GEMM smoke on PyTorch: FP32, FP16 and BF16 GEMMs checked against float64, TFLOPS, copy
bandwidth. On a machine without a GPU it checks correctness on the CPU and says so
("status": "no-gpu"). Prints one JSON object; exit 0 ok, 1 wrong results, 3 no GPU.

By hand on a GPU host:  python3 /opt/rocmforge/probes/gemm_torch.py [N]
"""

import json
import sys
import time

import torch

TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def rel_err(c, a, b):
    ref = a.double() @ b.double()
    mag = a.double().abs() @ b.double().abs()
    return float(((c.double() - ref).abs() / mag.clamp_min(1e-30)).max())


def check(device, n):
    out = {}
    g = torch.Generator(device="cpu").manual_seed(42)
    for name, dt in DTYPES.items():
        a = (torch.rand(n, n, generator=g) * 2 - 1).to(dt)
        b = (torch.rand(n, n, generator=g) * 2 - 1).to(dt)
        c = (a.to(device) @ b.to(device)).cpu()
        err = rel_err(c, a, b)
        out[name] = {"max_rel_err": err, "ok": err <= TOL[name]}
    return out


def throughput(n, iters=10):
    out = {}
    for name, dt in DTYPES.items():
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        a @ b
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            a @ b
        torch.cuda.synchronize()
        out[name] = {"tflops": 2 * n ** 3 * iters / (time.perf_counter() - t0) / 1e12}
    src = torch.empty(1 << 28, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        dst.copy_(src)
    torch.cuda.synchronize()
    out["copy_tbps"] = 2 * src.numel() * 4 * 20 / (time.perf_counter() - t0) / 1e12
    return out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    if not torch.cuda.is_available():
        cpu = check("cpu", 256)
        ok = all(v["ok"] for v in cpu.values())
        print(json.dumps({"status": "no-gpu", "reason": "torch.cuda.is_available() is False", "cpu_check": cpu,
                          "torch": torch.__version__, "hip": torch.version.hip}))
        return 3 if ok else 1
    props = torch.cuda.get_device_properties(0)
    res = {"status": "ok", "device": props.name, "gfx": getattr(props, "gcnArchName", ""), "n": n}
    gpu = check("cuda", 1024)
    res.update(throughput(n))
    for k, v in gpu.items():
        res[k].update(v)
    if not all(v["ok"] for v in gpu.values()):
        res["status"] = "wrong-result"
    print(json.dumps(res))
    return 0 if res["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
