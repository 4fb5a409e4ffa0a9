#!/usr/bin/env python3
"""Workload probe: the seeds' LLM settings and workloads run with this image's own libraries.

Copied into a container and run as
    PYTHON workload.py --config-dir /opt/rocmforge/config [--require-gpu] [--expect NAME ...]
It prints ONE JSON object on its last stdout line (everything else goes to stderr):
    {"device", "gpu", "versions", "checks": [{"name", "status", "detail", "figures"}],
     "overrides", "seconds"}
status is "passed", "failed", "not GPU-verified" or "not applicable". Exit 1 if a check failed.

Standalone on purpose: stdlib at module level (the unit tests import it without torch); torch,
transformers, peft, bitsandbytes and yaml are imported lazily. Runs on Python 3.9 / torch 1.13.1 /
transformers 4.31.0 / peft 0.4.0 up to Python 3.14 / torch 2.14 / transformers 5.x: API
differences are feature-detected, never assumed from a version number.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import inspect
import json
import math
import os
import sys
import tempfile
import time
import traceback

PASSED, FAILED, NOT_GPU, NA = "passed", "failed", "not GPU-verified", "not applicable"
CHECKS = ["settings/training_args.json", "settings/amp.json", "settings/config.yaml",
          "train", "lora", "qlora-4bit", "inference"]
EXPECTABLE = ("transformers", "accelerate", "peft", "bitsandbytes")

# Seed 004's amp.json: the keys it may hold. Nested sections are checked against the installed
# GradScaler / AdamW signatures when those are at hand, else against these names.
AMP_TOP_KEYS = {"torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32", "grad_scaler",
                "optimizer", "max_grad_norm", "gradient_checkpointing", "flash_attention", "batch_first"}
GRAD_SCALER_KEYS = {"init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"}
ADAMW_KEYS = {"name", "lr", "betas", "eps", "weight_decay", "amsgrad"}
# Seed 004's config.yaml. "backend"/"device"/"platform"/"target" may say which GPU stack it targets.
CONFIG_KEYS = {
    "engine": {"max_batch_size", "max_seq_length", "beam_width", "enable_fp8", "backend", "device"},
    "quantization": {"weight_bits", "group_size", "zero_point", "quant_type", "backend"},
    "scheduling": {"timeout_ms", "prefill_chunk_size", "max_active_adapters"},
}
CONFIG_TARGET_KEYS = ("backend", "device", "platform", "target")
# 4-bit block sizes bitsandbytes accepts. ROCm's fork (HIP backend, the one the matrix builds)
# asserts blocksize in [4096, ..., 128] when HIP is in use; CUDA also takes 64 (newer releases 32).
BNB_4BIT_BLOCKSIZES_HIP = (4096, 2048, 1024, 512, 256, 128)
BNB_4BIT_BLOCKSIZES_CUDA = (4096, 2048, 1024, 512, 256, 128, 64)

# The tiny model every workload uses: random weights, nothing downloaded, no tokenizer.
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, vocab_size=256, max_position_embeddings=128)
SEQ_LEN = 32
TRAIN_STEPS = 30
TRAIN_LR = 3e-3          # the seeds' 4e-5 / 6e-5 barely move a random tiny model in 30 steps
LORA_STEPS = 30
LORA_LR = 1e-2           # LoRA adapts a briefly pre-trained tiny model to a new pattern (stride 3)
LORA_TASK_STEP = 3
COUNT_VOCAB = 64         # the inference model's vocabulary and hidden size (one direction per token)


# ---------------------------------------------------------------------------------------------
# pure helpers (unit-tested without torch)

def accepted_keys(cls) -> set:
    """The keyword arguments a class (a dataclass like TrainingArguments, or any callable) accepts."""
    keys = set()
    if dataclasses.is_dataclass(cls):
        keys |= {f.name for f in dataclasses.fields(cls) if f.init}
    try:
        params = inspect.signature(cls).parameters.values()
        keys |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    except (TypeError, ValueError):
        pass
    return keys


def rejected_training_args(settings: dict, cls, version: str, filename: str = "training_args.json") -> list:
    """One message per key the installed TrainingArguments does not accept, naming key, file, version."""
    ok = accepted_keys(cls)
    name = getattr(cls, "__name__", "TrainingArguments")
    return [f"{filename}: key {k!r} is not accepted by transformers {version}'s {name}"
            for k in settings if k not in ok]


def amp_problems(settings: dict, filename: str = "amp.json", scaler_keys=None, optimizer_keys=None) -> list:
    """Unknown or wrong keys in seed 004's amp.json, each message naming the key and the file."""
    out = []
    if not isinstance(settings, dict):
        return [f"{filename}: expected a JSON object, got {type(settings).__name__}"]
    for k in settings:
        if k not in AMP_TOP_KEYS:
            out.append(f"{filename}: unknown key {k!r} (known: {', '.join(sorted(AMP_TOP_KEYS))})")
    gs = settings.get("grad_scaler", {})
    if not isinstance(gs, dict):
        out.append(f"{filename}: 'grad_scaler' must be an object")
    else:
        known = set(scaler_keys) if scaler_keys else GRAD_SCALER_KEYS
        out += [f"{filename}: unknown key 'grad_scaler.{k}' (GradScaler takes {', '.join(sorted(known))})"
                for k in gs if k not in known]
    opt = settings.get("optimizer", {})
    if not isinstance(opt, dict):
        out.append(f"{filename}: 'optimizer' must be an object")
    else:
        known = (set(optimizer_keys) | {"name"}) if optimizer_keys else ADAMW_KEYS
        out += [f"{filename}: unknown key 'optimizer.{k}' (AdamW takes {', '.join(sorted(known - {'name'}))})"
                for k in opt if k not in known]
        if opt.get("name", "AdamW") != "AdamW":
            out.append(f"{filename}: optimizer.name {opt.get('name')!r} is not supported (only AdamW)")
    return out


def config_declares_hip(cfg: dict) -> bool:
    """Whether seed 004's config.yaml says it targets HIP/ROCm (a backend/device/platform/target value)."""
    sections = [cfg] + [v for v in cfg.values() if isinstance(v, dict)] if isinstance(cfg, dict) else []
    for sec in sections:
        for k in CONFIG_TARGET_KEYS:
            v = sec.get(k)
            if isinstance(v, str) and any(w in v.lower() for w in ("hip", "rocm", "amd")):
                return True
    return False


def config_problems(cfg, hip: bool, filename: str = "config.yaml", backend_answer=None) -> list:
    """Unknown keys and settings the HIP backend rejects in seed 004's config.yaml.

    backend_answer: (accepted, detail) from bitsandbytes itself quantizing with the file's
    group_size on this GPU; when given it decides, not the list of block sizes known here."""
    if not isinstance(cfg, dict):
        return [f"{filename}: expected a mapping, got {type(cfg).__name__}"]
    out = []
    for k, v in cfg.items():
        if k in CONFIG_TARGET_KEYS:
            continue
        if k not in CONFIG_KEYS:
            out.append(f"{filename}: unknown section {k!r} (known: {', '.join(sorted(CONFIG_KEYS))})")
        elif not isinstance(v, dict):
            out.append(f"{filename}: {k!r} must be a mapping")
        else:
            out += [f"{filename}: unknown key '{k}.{kk}'" for kk in v if kk not in CONFIG_KEYS[k]]
    q = cfg.get("quantization") or {}
    if isinstance(q, dict):
        bits = q.get("weight_bits")
        if bits is not None and bits not in (4, 8, 16):
            out.append(f"{filename}: quantization.weight_bits {bits!r}: bitsandbytes quantizes to 4 or 8 bits")
        gs = q.get("group_size")
        if gs is not None and bits in (4, None) and backend_answer is not None:
            accepted, detail = backend_answer
            if not accepted:
                out.append(f"{filename}: quantization.group_size {gs} is rejected by bitsandbytes itself: {detail}")
        elif gs is not None and bits in (4, None):
            allowed = BNB_4BIT_BLOCKSIZES_HIP if hip else BNB_4BIT_BLOCKSIZES_CUDA
            if gs not in allowed:
                why = ("ROCm's bitsandbytes (HIP backend) asserts a 4-bit blocksize in "
                       f"{list(BNB_4BIT_BLOCKSIZES_HIP)}" if hip else
                       f"bitsandbytes accepts a 4-bit blocksize in {list(BNB_4BIT_BLOCKSIZES_CUDA)}")
                extra = " (64 is allowed on CUDA only)" if hip and gs == 64 else ""
                out.append(f"{filename}: quantization.group_size {gs} is rejected: {why}{extra}; "
                           f"use one the backend accepts, e.g. 128")
    eng = cfg.get("engine") or {}
    if isinstance(eng, dict):
        for k in ("max_batch_size", "max_seq_length", "beam_width"):
            v = eng.get(k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                out.append(f"{filename}: engine.{k} must be a positive integer, got {v!r}")
    return out


def loss_falls(losses, factor: float = 0.9):
    """(ok, why): all losses finite and the mean of the last few clearly below the first few."""
    if len(losses) < 4:
        return False, f"only {len(losses)} losses recorded"
    bad = [x for x in losses if not (isinstance(x, (int, float)) and math.isfinite(x))]
    if bad:
        return False, f"non-finite loss {bad[0]!r} in {len(losses)} steps"
    k = max(1, min(3, len(losses) // 4))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    if last < factor * first:
        return True, f"loss {first:.3f} -> {last:.3f} over {len(losses)} steps"
    return False, f"loss did not fall: {first:.3f} -> {last:.3f} over {len(losses)} steps (want < {factor} x first)"


def expected_bnb_library(torch_hip, torch_cuda) -> str:
    """The native library name bitsandbytes looks for with this torch (a prefix when HIP/CUDA)."""
    def digits(v):
        parts = str(v).split(".")
        return "".join(parts[:2])
    if torch_hip:
        return f"libbitsandbytes_rocm{digits(torch_hip)}"
    if torch_cuda:
        return f"libbitsandbytes_cuda{digits(torch_cuda)}"
    return "libbitsandbytes_cpu"


def dist_version(name: str):
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return metadata.version(name)
    except Exception:
        return None


def importable(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def json_channel():
    """A stream to the real stdout, with fd 1 itself pointed at stderr: whatever the libraries
    print (Python or C, buffered or not) goes to stderr, so the JSON line is stdout's last."""
    sys.stdout.flush()
    try:
        fd = os.dup(1)
        os.dup2(2, 1)
        return os.fdopen(fd, "w")
    except OSError:
        return sys.stdout


class Report:
    def __init__(self):
        self.checks = []
        self.overrides = []

    def add(self, name, status, detail="", figures=None):
        self.checks.append({"name": name, "status": status, "detail": detail, "figures": figures or {}})

    def override(self, text):
        if text not in self.overrides:
            self.overrides.append(text)


# ---------------------------------------------------------------------------------------------
# environment

class Env:
    """What the probe found: device, libraries, flags."""

    def __init__(self, args):
        self.args = args
        self.config_dir = args.config_dir
        self.require_gpu = args.require_gpu
        self.expect = set(args.expect or [])
        self.torch = None
        self.torch_error = None
        self.gpu = False
        self.device = "cpu"
        self.device_desc = "cpu"
        self.hip = None
        try:
            import torch
            self.torch = torch
            self.hip = getattr(torch.version, "hip", None)
            self.gpu = bool(torch.cuda.is_available())
        except Exception as exc:  # noqa: BLE001 - report any import failure
            self.torch_error = f"{type(exc).__name__}: {exc}"
        if self.torch is not None:
            torch = self.torch
            torch.set_num_threads(max(1, min(4, usable_cpus())))
            if self.gpu:
                self.device = "cuda:0"
                try:
                    name = torch.cuda.get_device_name(0)
                    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", None)
                    arch = arch.split(":")[0] if arch else None
                    self.device_desc = f"cuda:0 ({name}, {arch})" if arch else f"cuda:0 ({name})"
                except Exception as exc:  # noqa: BLE001 - the checks will report what fails
                    self.device_desc = f"cuda:0 (properties unavailable: {type(exc).__name__}: {exc})"

    def path(self, name):
        return os.path.join(self.config_dir, name) if self.config_dir else None

    def exists(self, name):
        p = self.path(name)
        return bool(p) and os.path.isfile(p)

    def no_gpu_status(self):
        return FAILED if self.require_gpu else NOT_GPU

    def no_gpu_reason(self, what):
        why = "torch.cuda.is_available() is False"
        if self.torch is not None and not self.hip and not getattr(self.torch.version, "cuda", None):
            why += f" (torch {self.torch.__version__} is a CPU build)"
        pre = "--require-gpu given but " if self.require_gpu else "no GPU: "
        return f"{pre}{why}; {what}"

    def versions(self):
        v = {"python": sys.version.split()[0],
             "torch": getattr(self.torch, "__version__", None) if self.torch else dist_version("torch"),
             "torch_hip": self.hip}
        for name in ("transformers", "peft", "accelerate", "bitsandbytes", "tensorboard"):
            v[name] = dist_version(name)
        return v


def load_json(path):
    with open(path) as f:
        return json.load(f)


def load_yaml(path):
    try:
        import yaml
    except ImportError as exc:
        raise RuntimeError(f"{os.path.basename(path)} needs PyYAML, which does not import: {exc}")
    with open(path) as f:
        return yaml.safe_load(f)


def seed_everything(seed=0):
    import random
    random.seed(seed)
    env_torch = sys.modules.get("torch")
    if env_torch is not None:
        env_torch.manual_seed(seed)


def tiny_model(torch_dtype=None, attn=None):
    import transformers
    cfg_kwargs = dict(TINY)
    if "num_key_value_heads" not in accepted_keys(transformers.LlamaConfig):
        cfg_kwargs.pop("num_key_value_heads")
    cfg = transformers.LlamaConfig(**cfg_kwargs)
    cfg.use_cache = False
    if attn:
        try:
            cfg._attn_implementation = attn
        except Exception:  # noqa: BLE001 - older/newer configs differ; eager is the old default
            pass
    seed_everything(0)
    model = transformers.LlamaForCausalLM(cfg)
    if torch_dtype is not None:
        model = model.to(torch_dtype)
    return model


def pattern_batch(n, seq_len=SEQ_LEN, seed=0, step=1):
    """Learnable synthetic tokens: counting sequences (next = current + step, mod 64) from random starts."""
    import torch
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, 64, (n, 1), generator=g)
    ids = (starts + step * torch.arange(seq_len).unsqueeze(0)) % 64 + 4
    return ids


class PatternDataset:
    def __init__(self, n=64, seq_len=SEQ_LEN):
        self.ids = pattern_batch(n, seq_len)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        import torch
        x = self.ids[i]
        return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x.clone()}


# ---------------------------------------------------------------------------------------------
# checks

def training_args_kwargs(env, report, settings, out_dir, cls, transformers_version, for_training=False):
    """The seed's TrainingArguments with only what this device cannot run overridden (each reported)."""
    ok = accepted_keys(cls)
    kw = {k: v for k, v in settings.items() if k in ok}
    for k in settings:
        if k not in ok:
            report.override(f"{k}={settings[k]!r} dropped (not accepted by transformers {transformers_version})")
    kw["output_dir"] = out_dir
    if "logging_dir" in ok:
        kw["logging_dir"] = os.path.join(out_dir, "runs")
    rt = kw.get("report_to")
    wants_tb = rt == "tensorboard" or (isinstance(rt, (list, tuple)) and "tensorboard" in rt)
    if wants_tb and not (importable("tensorboard") or importable("tensorboardX")):
        kw["report_to"] = "none"
        report.override(f"report_to={rt!r} -> 'none' (tensorboard not importable)")
    if not env.gpu:
        cpu_key = "use_cpu" if "use_cpu" in ok else "no_cuda"
        if kw.get("fp16"):
            kw["fp16"] = False
            report.override("fp16=True -> False (no GPU: fp16 mixed precision needs one)")
        if kw.get("bf16") or settings.get("fp16"):
            kw[cpu_key] = True
            report.override(f"bf16={settings.get('bf16')!r} -> {cpu_key}=True (no GPU)")
        optim = str(kw.get("optim", ""))
        if "paged" in optim or "bnb" in optim or "8bit" in optim:
            kw["optim"] = "adamw_torch"
            report.override(f"optim={optim} -> adamw_torch (no GPU: bitsandbytes' paged optimizers need one)")
    else:
        torch = env.torch
        if kw.get("bf16") and not torch.cuda.is_bf16_supported():
            kw["bf16"], kw["fp16"] = False, True
            report.override("bf16=True -> fp16=True (this GPU does not support bf16)")
        optim = str(kw.get("optim", ""))
        if ("paged" in optim or "bnb" in optim or "8bit" in optim) and not importable("bitsandbytes"):
            kw["optim"] = "adamw_torch"
            report.override(f"optim={optim} -> adamw_torch (bitsandbytes not installed)")
    if for_training:
        lr = kw.get("learning_rate")
        if lr is None or lr < TRAIN_LR:
            kw["learning_rate"] = TRAIN_LR
            report.override(f"learning_rate={lr} -> {TRAIN_LR} (tiny random model, {TRAIN_STEPS} steps)")
        kw["max_steps"] = TRAIN_STEPS
        kw["logging_steps"] = 1
        if "logging_strategy" in ok:
            kw["logging_strategy"] = "steps"
        kw["save_strategy"] = "no"
        kw["seed"] = 0
        if "disable_tqdm" in ok:
            kw["disable_tqdm"] = True
        if "dataloader_pin_memory" in ok:
            kw["dataloader_pin_memory"] = False
    return kw


def check_training_args(env, report):
    name = "settings/training_args.json"
    if not env.exists("training_args.json"):
        return report.add(name, NA, f"no training_args.json in {env.config_dir}")
    import transformers
    path = env.path("training_args.json")
    settings = load_json(path)
    cls = transformers.TrainingArguments
    version = transformers.__version__
    problems = rejected_training_args(settings, cls, version, path)
    figures = {"keys": len(settings), "transformers": version}
    with tempfile.TemporaryDirectory(prefix="rocmforge-wl-") as tmp:
        kw = training_args_kwargs(env, report, settings, tmp, cls, version)
        try:
            ta = cls(**kw)
            optim = getattr(ta, "optim", "")
            figures.update({"optim": str(getattr(optim, "value", optim)), "device": str(ta.device),
                            "bf16": bool(getattr(ta, "bf16", False))})
            built = "the accepted keys construct TrainingArguments"
        except Exception as exc:  # noqa: BLE001
            problems.append(f"TrainingArguments(**{os.path.basename(path)}) raised {type(exc).__name__}: {exc}")
            built = None
    if problems:
        return report.add(name, FAILED, "; ".join(problems) + (f" ({built})" if built else ""), figures)
    report.add(name, PASSED, f"{len(settings)} keys accepted by transformers {version}; {built}", figures)


def make_grad_scaler(env, gs):
    """(scaler, kind): the GradScaler seed 004 describes on this device; kind says which API."""
    torch = env.torch
    amp = getattr(torch, "amp", None)
    if env.gpu:
        if amp is not None and hasattr(amp, "GradScaler"):
            return amp.GradScaler("cuda", **gs), "torch.amp.GradScaler('cuda')"
        return torch.cuda.amp.GradScaler(**gs), "torch.cuda.amp.GradScaler"
    if amp is not None and hasattr(amp, "GradScaler"):
        try:
            return amp.GradScaler("cpu", **gs), "torch.amp.GradScaler('cpu')"
        except Exception:  # noqa: BLE001 - falls through to the CUDA one, which disables itself
            pass
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.cuda.amp.GradScaler(**gs), "torch.cuda.amp.GradScaler"


def check_amp(env, report):
    name = "settings/amp.json"
    if not env.exists("amp.json"):
        return report.add(name, NA, f"no amp.json in {env.config_dir}")
    torch = env.torch
    path = env.path("amp.json")
    s = load_json(path)
    scaler_keys = accepted_keys(torch.cuda.amp.GradScaler) - {"self", "device"}
    opt_keys = accepted_keys(torch.optim.AdamW) - {"params", "self"}
    problems = amp_problems(s, path, scaler_keys, opt_keys)
    if problems:
        return report.add(name, FAILED, "; ".join(problems))
    torch.backends.cuda.matmul.allow_tf32 = bool(s.get("torch.backends.cuda.matmul.allow_tf32", False))
    torch.backends.cudnn.allow_tf32 = bool(s.get("torch.backends.cudnn.allow_tf32", False))
    figures = {"cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
               "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    opt_cfg = {k: v for k, v in s.get("optimizer", {}).items() if k != "name"}
    if "betas" in opt_cfg:
        opt_cfg["betas"] = tuple(opt_cfg["betas"])
    p = torch.nn.Parameter(torch.ones(4, device=env.device))
    opt = torch.optim.AdamW([p], **opt_cfg)
    gs = dict(s.get("grad_scaler", {}))
    scaler, kind = make_grad_scaler(env, gs)
    figures["grad_scaler"] = kind
    if not scaler.is_enabled():
        return report.add(name, env.no_gpu_status(), env.no_gpu_reason(
            f"{kind}({', '.join(f'{k}={v}' for k, v in gs.items())}) disabled itself (torch "
            f"{torch.__version__} has no CPU GradScaler); TF32 flags set, AdamW built"), figures)
    # Exercise the scaler as seed 004 configures it: an inf gradient skips the step and backs off;
    # growth_interval finite steps grow the scale.
    init = scaler.get_scale()
    scaler.scale(p.sum()).backward()
    p.grad.fill_(float("inf"))
    before = p.detach().clone()
    scaler.step(opt)
    scaler.update()
    backed = scaler.get_scale()
    skipped = bool(torch.equal(before, p.detach()))
    interval = int(gs.get("growth_interval", 2000))
    for _ in range(min(interval, 400)):
        opt.zero_grad()
        scaler.scale(p.sum() * 0.0).backward()
        scaler.step(opt)
        scaler.update()
    grown = scaler.get_scale()
    figures.update({"init_scale": init, "after_inf": backed, "after_growth_interval": grown,
                    "inf_step_skipped": skipped})
    want_back = init * gs.get("backoff_factor", 0.5)
    want_grow = want_back * gs.get("growth_factor", 2.0) if interval <= 400 else None
    bad = []
    if abs(init - gs.get("init_scale", init)) > 1e-6:
        bad.append(f"initial scale {init} != init_scale {gs.get('init_scale')}")
    if abs(backed - want_back) > 1e-6 or not skipped:
        bad.append(f"an inf gradient gave scale {backed} (want {want_back}) and step skipped={skipped}")
    if want_grow is not None and abs(grown - want_grow) > 1e-6:
        bad.append(f"after {interval} finite steps the scale is {grown} (want {want_grow})")
    where = "on " + env.device_desc
    if bad:
        return report.add(name, FAILED, f"{kind} {where}: " + "; ".join(bad), figures)
    report.add(name, PASSED, f"TF32 off as set, AdamW{tuple(sorted(opt_cfg))} built, {kind} {where}: "
               f"scale {init} -> {backed} on inf -> {grown} after {interval} steps", figures)


def config_is_hip(env, cfg):
    return bool(env.hip) or config_declares_hip(cfg) or bnb_native_is_rocm()


def bnb_native_libs():
    import importlib.util
    try:
        spec = importlib.util.find_spec("bitsandbytes")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, []
    d = list(spec.submodule_search_locations)[0]
    return d, sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "libbitsandbytes_*")))


def bnb_native_is_rocm():
    _, libs = bnb_native_libs()
    return bool(libs) and all("rocm" in x or "hip" in x for x in libs)


def check_config_yaml(env, report):
    name = "settings/config.yaml"
    if not env.exists("config.yaml"):
        return report.add(name, NA, f"no config.yaml in {env.config_dir}")
    path = env.path("config.yaml")
    cfg = load_yaml(path)
    hip = config_is_hip(env, cfg)
    eng = (cfg or {}).get("engine") or {}
    q = (cfg or {}).get("quantization") or {}
    gen = {"batch_size": min(int(eng.get("max_batch_size", 1)), 8), "num_beams": int(eng.get("beam_width", 1)),
           "max_length": min(int(eng.get("max_seq_length", TINY["max_position_embeddings"])),
                             TINY["max_position_embeddings"])}
    why_hip = ("torch is a ROCm build (torch.version.hip=%s)" % env.hip if env.hip else
               "the file declares a HIP target" if config_declares_hip(cfg) else
               "bitsandbytes ships only ROCm libraries" if hip else "not HIP")
    figures = {"generation": gen, "hip": hip, "hip_because": why_hip, "group_size": q.get("group_size")}
    answer = None
    if env.gpu and q.get("group_size") and importable("bitsandbytes"):
        # Ask the real backend on this GPU: its answer decides for this device, not our list.
        try:
            import bitsandbytes.functional as F
            w = env.torch.randn(128, 128, device=env.device, dtype=env.torch.float16)
            F.quantize_4bit(w, blocksize=int(q["group_size"]), quant_type="nf4")
            answer = (True, "accepted")
        except BaseException as exc:  # noqa: BLE001 - AssertionError is what the fork raises
            if isinstance(exc, KeyboardInterrupt):
                raise
            answer = (False, f"{type(exc).__name__}: {exc}"[:300])
        figures["bnb_quantize_4bit_on_gpu"] = answer[1] if answer[0] else "rejected: " + answer[1]
        figures["group_size_decided_by"] = "bitsandbytes on this GPU"
    else:
        figures["group_size_decided_by"] = "the block sizes known for the backend (no GPU to ask bitsandbytes on)"
    problems = config_problems(cfg, hip, path, backend_answer=answer)
    real = figures.get("bnb_quantize_4bit_on_gpu")
    real = f"; bitsandbytes quantize_4bit(blocksize={q.get('group_size')}) on {env.device_desc}: {real}" if real else ""
    if problems:
        return report.add(name, FAILED, "; ".join(problems) + f" (HIP because {why_hip}){real}", figures)
    report.add(name, PASSED, f"engine settings map to generate(num_beams={gen['num_beams']}, batch "
               f"{gen['batch_size']}); quantization group_size {q.get('group_size')} accepted ({why_hip}){real}",
               figures)


def run_trainer(env, report, settings, transformers):
    """Seed 000: transformers.Trainer with the seed's TrainingArguments."""
    cls = transformers.TrainingArguments
    with tempfile.TemporaryDirectory(prefix="rocmforge-wl-") as tmp:
        kw = training_args_kwargs(env, report, settings, tmp, cls, transformers.__version__, for_training=True)
        args = cls(**kw)
        model = tiny_model()
        trainer = transformers.Trainer(model=model, args=args, train_dataset=PatternDataset())
        t0 = time.time()
        trainer.train()
        secs = time.time() - t0
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    dev = str(next(model.parameters()).device)
    optim = getattr(args.optim, "value", args.optim)
    return losses, secs, {"via": "transformers.Trainer", "optim": str(optim), "bf16": bool(args.bf16),
                          "fp16": bool(args.fp16), "learning_rate": args.learning_rate, "param_device": dev}


def run_amp_loop(env, report, amp):
    """Seed 004: a plain loop with its AdamW, GradScaler, clip_grad_norm_ and gradient checkpointing."""
    torch = env.torch
    model = tiny_model(attn="eager" if not amp.get("flash_attention", False) else None).to(env.device)
    if amp.get("gradient_checkpointing", True):
        model.gradient_checkpointing_enable()
    model.train()
    opt_cfg = {k: v for k, v in amp.get("optimizer", {}).items() if k != "name"}
    if "betas" in opt_cfg:
        opt_cfg["betas"] = tuple(opt_cfg["betas"])
    lr = opt_cfg.get("lr", 1e-3)
    if lr < TRAIN_LR:
        opt_cfg["lr"] = TRAIN_LR
        report.override(f"optimizer.lr={lr} -> {TRAIN_LR} (tiny random model, {TRAIN_STEPS} steps)")
    opt = torch.optim.AdamW(model.parameters(), **opt_cfg)
    scaler, kind = make_grad_scaler(env, dict(amp.get("grad_scaler", {})))
    if not scaler.is_enabled():
        report.override(f"{kind} disabled itself (no GPU, torch {torch.__version__} has no CPU GradScaler): "
                        "loss not scaled")
    use_autocast = env.gpu
    dtype = torch.float16
    max_norm = float(amp.get("max_grad_norm", 1.0))
    ids = pattern_batch(64).to(env.device)
    losses = []
    t0 = time.time()
    for step in range(TRAIN_STEPS):
        batch = ids[(step * 4) % 64:(step * 4) % 64 + 4]
        opt.zero_grad()
        ctx = torch.autocast(device_type="cuda", dtype=dtype) if use_autocast else contextlib.nullcontext()
        with ctx:
            loss = model(input_ids=batch, labels=batch).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(opt)
        scaler.update()
        losses.append(float(loss.detach()))
    if env.gpu:
        torch.cuda.synchronize()
    secs = time.time() - t0
    return losses, secs, {"via": "AdamW loop (amp.json)", "grad_scaler": kind, "scale": scaler.get_scale(),
                          "autocast": "float16" if use_autocast else None, "max_grad_norm": max_norm,
                          "gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", True)),
                          "learning_rate": opt_cfg["lr"]}


def check_train(env, report):
    import transformers
    seed_everything(0)
    if env.exists("training_args.json"):
        losses, secs, figs = run_trainer(env, report, load_json(env.path("training_args.json")), transformers)
        src = "training_args.json"
    elif env.exists("amp.json"):
        losses, secs, figs = run_amp_loop(env, report, load_json(env.path("amp.json")))
        src = "amp.json"
    else:
        losses, secs, figs = run_amp_loop(env, report, {"optimizer": {"lr": TRAIN_LR}, "max_grad_norm": 1.0,
                                                       "gradient_checkpointing": False})
        src = "defaults (no settings file)"
    ok, why = loss_falls(losses)
    figures = dict(figs, first_loss=round(losses[0], 4) if losses else None,
                   last_loss=round(losses[-1], 4) if losses else None, steps=len(losses), seconds=round(secs, 2),
                   settings=src)
    gpu_note(env, report, "train", PASSED if ok else FAILED, f"{why} on {env.device_desc} with {src}", figures)


def gpu_note(env, report, name, status, detail, figures):
    """A CPU-capable check: on a host without GPU it may pass on the CPU, unless --require-gpu."""
    if status == PASSED and env.require_gpu and not env.gpu:
        return report.add(name, FAILED, env.no_gpu_reason(f"ran on the CPU only ({detail})"), figures)
    report.add(name, status, detail, figures)


def lora_train(env, model, steps, lr, optimizer_cls=None, device=None, step=1):
    torch = env.torch
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (optimizer_cls or torch.optim.AdamW)(params, lr=lr)
    ids = pattern_batch(64, step=step).to(device or env.device)
    model.train()
    losses = []
    for i in range(steps):
        batch = ids[(i * 8) % 64:(i * 8) % 64 + 8]
        opt.zero_grad()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def trainable_summary(model):
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in model.parameters())
    non_lora = [n for n in names if "lora_" not in n]
    return n_train, n_all, non_lora


def lora_config(peft):
    kw = dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, bias="none")
    try:
        return peft.LoraConfig(task_type="CAUSAL_LM", **kw)
    except TypeError:
        return peft.LoraConfig(task_type=peft.TaskType.CAUSAL_LM, **kw)


def pretrained_tiny(env, device):
    """A tiny model briefly pre-trained on the stride-1 pattern: LoRA then adapts it to stride 3
    (a random base barely responds to rank-8 q/v adapters in a few steps)."""
    model = tiny_model().to(device)
    losses = lora_train(env, model, TRAIN_STEPS, TRAIN_LR, device=device)
    return model, losses[-1]


def check_lora(env, report):
    if not importable("peft"):
        status = FAILED if "peft" in env.expect else NA
        why = "peft not installed" + (" (the image declares it)" if status == FAILED else "")
        return report.add("lora", status, why)
    import peft
    model, base_loss = pretrained_tiny(env, env.device)
    model = peft.get_peft_model(model, lora_config(peft))
    n_train, n_all, non_lora = trainable_summary(model)
    t0 = time.time()
    losses = lora_train(env, model, LORA_STEPS, LORA_LR, step=LORA_TASK_STEP)
    if env.gpu:
        env.torch.cuda.synchronize()
    secs = time.time() - t0
    ok, why = loss_falls(losses)
    figures = {"trainable_params": n_train, "all_params": n_all, "base_pretrain_loss": round(base_loss, 4),
               "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4), "steps": len(losses),
               "seconds": round(secs, 2), "lr": LORA_LR}
    if non_lora:
        return report.add("lora", FAILED, f"non-adapter parameters are trainable: {non_lora[:5]}", figures)
    gpu_note(env, report, "lora", PASSED if ok else FAILED,
             f"peft {peft.__version__} LoRA r=8 on q_proj,v_proj: {n_train}/{n_all} params trainable, {why} "
             f"on {env.device_desc}", figures)


def bnb_figures():
    d, libs = bnb_native_libs()
    figs = {"bnb_dir": d, "bnb_native_libraries": libs}
    torch = sys.modules.get("torch")
    if torch is not None:
        figs["bnb_expected_library"] = expected_bnb_library(getattr(torch.version, "hip", None),
                                                            getattr(torch.version, "cuda", None))
        figs["bnb_expected_present"] = any(x.startswith(figs["bnb_expected_library"]) for x in libs)
    return figs


def bnb_loaded_library():
    """The native library bitsandbytes actually loaded (after import), best effort across versions."""
    ce = sys.modules.get("bitsandbytes.cextension")
    lib = getattr(ce, "lib", None) if ce else None
    for obj in (getattr(lib, "_lib", None), lib):
        n = getattr(obj, "_name", None)
        if isinstance(n, str):
            return os.path.basename(n)
    return None


def run_qlora(env, report, device, peft_mod):
    """Tiny model -> 4-bit NF4 via from_pretrained(BitsAndBytesConfig) -> LoRA -> PagedAdamW32bit steps."""
    import bitsandbytes as bnb
    import torch
    import transformers
    on_gpu = device != "cpu"
    compute = torch.bfloat16
    if on_gpu and not torch.cuda.is_bf16_supported():
        compute = torch.float16
        report.override("bnb_4bit_compute_dtype=bfloat16 -> float16 (this GPU does not support bf16)")
    qcfg = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                           bnb_4bit_compute_dtype=compute, bnb_4bit_use_double_quant=False)
    base, base_loss = pretrained_tiny(env, "cpu")
    with tempfile.TemporaryDirectory(prefix="rocmforge-wl-") as tmp:
        base.save_pretrained(tmp)
        model = transformers.LlamaForCausalLM.from_pretrained(
            tmp, quantization_config=qcfg, device_map={"": 0 if on_gpu else "cpu"})
    n4 = sum(1 for m in model.modules() if isinstance(m, bnb.nn.Linear4bit))
    figures = {"linear4bit_modules": n4, "compute_dtype": str(compute).replace("torch.", ""),
               "bnb_loaded_library": bnb_loaded_library(), "base_pretrain_loss": round(base_loss, 4)}
    if n4 == 0:
        raise RuntimeError("from_pretrained(quantization_config=4-bit) produced no bnb Linear4bit module")
    model.train()  # before any forward: eval-mode forwards repack 4-bit weights for inference
    # The 4-bit model must still know the pattern its full-precision base learned.
    with torch.no_grad():
        ids = pattern_batch(8, seed=2).to(device)
        q_loss = float(model(input_ids=ids, labels=ids).loss)
    figures["base_4bit_loss"] = round(q_loss, 4)
    if not (math.isfinite(q_loss) and q_loss < base_loss + 1.0):
        return False, (f"the 4-bit model lost what its base learned: loss {q_loss:.3f} vs {base_loss:.3f} "
                       "in full precision"), figures
    if peft_mod is None:
        return True, (f"4-bit forward only (peft not installed): loss {q_loss:.3f} vs {base_loss:.3f} "
                      "in full precision"), figures
    prep = getattr(peft_mod, "prepare_model_for_kbit_training", None)
    if prep is not None:
        model = prep(model, use_gradient_checkpointing=False)
    model = peft_mod.get_peft_model(model, lora_config(peft_mod))
    n_train, n_all, non_lora = trainable_summary(model)
    if non_lora:
        raise RuntimeError(f"non-adapter parameters are trainable: {non_lora[:5]}")
    opt_cls = bnb.optim.PagedAdamW32bit
    t0 = time.time()
    losses = lora_train(env, model, LORA_STEPS, LORA_LR, optimizer_cls=opt_cls, device=device,
                        step=LORA_TASK_STEP)
    if on_gpu:
        torch.cuda.synchronize()
    figures.update({"optimizer": "bnb.optim.PagedAdamW32bit", "trainable_params": n_train,
                    "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4), "steps": len(losses),
                    "seconds": round(time.time() - t0, 2)})
    ok, why = loss_falls(losses)
    return ok, f"NF4 4-bit ({n4} Linear4bit), LoRA r=8, PagedAdamW32bit: {why}", figures


def check_qlora(env, report):
    name = "qlora-4bit"
    figures = bnb_figures()
    if not importable("bitsandbytes"):
        if "bitsandbytes" in env.expect:
            return report.add(name, FAILED, "bitsandbytes is not installed but the image declares it", figures)
        return report.add(name, NA, "bitsandbytes not installed", figures)
    peft_mod = None
    if importable("peft"):
        import peft as peft_mod
    elif "peft" in env.expect:
        return report.add(name, FAILED, "peft is not installed but the image declares it", figures)
    if not env.gpu:
        # Try the CPU backend for information only (recent bitsandbytes has one); never "passed".
        if "libbitsandbytes_cpu.so" in bnb_native_libs()[1] and os.environ.get("ROCMFORGE_WL_QLORA_CPU", "1") != "0":
            try:
                with contextlib.redirect_stderr(sys.stderr):
                    ok, why, figs = run_qlora(env, Report(), "cpu", peft_mod)
                figures.update({"cpu_run": ("ok: " if ok else "ran, but: ") + why})
                figures.update({("cpu_" + k): v for k, v in figs.items()})
            except BaseException as exc:  # noqa: BLE001
                if isinstance(exc, KeyboardInterrupt):
                    raise
                figures["cpu_run"] = f"{type(exc).__name__}: {exc}"[:300]
        return report.add(name, env.no_gpu_status(), env.no_gpu_reason(
            "bitsandbytes' 4-bit HIP kernels and paged optimizer need one"), figures)
    ok, why, figs = run_qlora(env, report, env.device, peft_mod)
    figures.update(figs)
    report.add(name, PASSED if ok else FAILED, f"{why} on {env.device_desc}", figures)


def counting_model(device):
    """A tiny LLaMA whose next token is known: fixed weights, no training. Token t embeds as the
    t-th unit vector; every attention and MLP block writes nothing back (o_proj and down_proj are
    zero, so their maths still runs, KV cache included), and the head maps direction t to token
    t + 1 (mod the vocabulary). Greedy and beam search must both count on from the prompt."""
    import torch
    import transformers
    # No bos/eos: LlamaConfig's default eos (2) would end a row that counts through 2.
    kwargs = dict(TINY, vocab_size=COUNT_VOCAB, hidden_size=COUNT_VOCAB, tie_word_embeddings=False,
                  bos_token_id=None, eos_token_id=None)
    if "num_key_value_heads" not in accepted_keys(transformers.LlamaConfig):
        kwargs.pop("num_key_value_heads")
    cfg = transformers.LlamaConfig(**kwargs)
    seed_everything(0)
    model = transformers.LlamaForCausalLM(cfg)
    eye = torch.eye(COUNT_VOCAB)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(eye)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.copy_(torch.roll(eye, shifts=1, dims=0))   # row t+1 reads direction t
    model.config.use_cache = True
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = None
        model.generation_config.bos_token_id = None
    return model.to(device).eval()


def counting_prompts(batch, prompt_len, vocab=COUNT_VOCAB, seed=1):
    """Counting sequences from different starts (the first rows wrap around the vocabulary)."""
    import random
    rng = random.Random(seed)
    starts = [vocab - prompt_len // 2] + [rng.randrange(vocab) for _ in range(batch - 1)]
    return [[(s + k) % vocab for k in range(prompt_len)] for s in starts[:batch]]


def continuation_problems(prompts, outputs, max_new, vocab=COUNT_VOCAB) -> list:
    """Why generated rows are not their prompts counted on by exactly max_new tokens (empty: they are)."""
    out = []
    if len(outputs) != len(prompts):
        return [f"{len(outputs)} output rows for {len(prompts)} prompts"]
    for i, (prompt, row) in enumerate(zip(prompts, outputs)):
        new = list(row[len(prompt):])
        if list(row[:len(prompt)]) != list(prompt):
            out.append(f"row {i}: the output does not start with its prompt")
        elif len(new) != max_new:
            out.append(f"row {i}: {len(new)} new tokens, want exactly max_new_tokens={max_new}")
        else:
            want = [(prompt[-1] + 1 + k) % vocab for k in range(max_new)]
            if new != want:
                at = next(k for k in range(max_new) if new[k] != want[k])
                out.append(f"row {i}: new token {at} is {new[at]}, the count says {want[at]} "
                           f"(got {new[:at + 2]}..., want {want[:at + 2]}...)")
    return out


def check_inference(env, report):
    torch = env.torch
    cfg = load_yaml(env.path("config.yaml")) if env.exists("config.yaml") else None
    eng = (cfg or {}).get("engine") or {}
    prompt_len = 8
    positions = TINY["max_position_embeddings"]
    batch = int(eng.get("max_batch_size", 1))
    if batch > 8:
        report.override(f"engine.max_batch_size={batch} -> 8 (tiny model)")
        batch = 8
    beams = int(eng.get("beam_width", 1))
    max_new = 16
    seq = int(eng.get("max_seq_length", positions))
    if seq > positions:
        report.override(f"engine.max_seq_length={seq} -> {positions} (tiny model's positions); "
                        f"max_new_tokens={max_new}")
    max_new = max(1, min(max_new, min(seq, positions) - prompt_len))
    model = counting_model(env.device)
    prompts = counting_prompts(batch, prompt_len)
    ids = torch.tensor(prompts, dtype=torch.long, device=env.device)
    mask = torch.ones_like(ids)
    # eos None: nothing may end a row early, so every row must get exactly max_new_tokens
    kw = dict(max_new_tokens=max_new, num_beams=beams, do_sample=False, pad_token_id=0, eos_token_id=None)
    if beams > 1:
        kw["early_stopping"] = True
    outs, ms = [], []
    for _ in range(2):
        t0 = time.time()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, **kw)
        if env.gpu:
            torch.cuda.synchronize()
        ms.append(round((time.time() - t0) * 1000, 1))
        outs.append(getattr(out, "sequences", out).cpu())
    mode = f"beam search ({beams} beams)" if beams > 1 else "greedy"
    src = "config.yaml" if cfg is not None else "no config.yaml: greedy defaults"
    figures = {"batch": batch, "num_beams": beams, "max_new_tokens": max_new,
               "generated": int(outs[0].shape[1]) - prompt_len if outs[0].dim() == 2 else None,
               "ms_per_generate": ms, "settings": src, "model": f"counting LLaMA (vocab {COUNT_VOCAB}, fixed weights)",
               "first_row": outs[0][0].tolist() if outs[0].dim() == 2 else None}
    problems = continuation_problems(prompts, outs[0].tolist(), max_new)
    if problems:
        return report.add("inference", FAILED, f"{mode}, batch {batch}: generate() did not count on from the "
                          f"prompt: " + "; ".join(problems[:3]), figures)
    if not bool(torch.equal(outs[0], outs[1])):
        diff = int((outs[0] != outs[1]).sum()) if outs[0].shape == outs[1].shape else "shape"
        return report.add("inference", FAILED, f"{mode} twice gave different tokens ({diff} differ)", figures)
    gpu_note(env, report, "inference", PASSED, f"{mode}, batch {batch}: exactly {max_new} new tokens per row, each "
             f"the count's next, identical twice on {env.device_desc} ({src})", figures)


CHECK_FUNCS = {
    "settings/training_args.json": check_training_args,
    "settings/amp.json": check_amp,
    "settings/config.yaml": check_config_yaml,
    "train": check_train,
    "lora": check_lora,
    "qlora-4bit": check_qlora,
    "inference": check_inference,
}
NEEDS_TORCH = set(CHECKS)
NEEDS_TRANSFORMERS = {"settings/training_args.json", "train", "lora", "qlora-4bit", "inference"}


def run_checks(env, report, only=None):
    for name in CHECKS:
        if only and name not in only:
            continue
        t0 = time.time()
        n_before = len(report.checks)
        try:
            if env.torch is None:
                report.add(name, FAILED, f"torch does not import: {env.torch_error}")
                continue
            if name in NEEDS_TRANSFORMERS and not importable("transformers"):
                if name.startswith("settings/") and not env.exists(name.split("/", 1)[1]):
                    report.add(name, NA, f"no {name.split('/', 1)[1]} in {env.config_dir}")
                else:
                    report.add(name, FAILED if ("transformers" in env.expect or name.startswith("settings/"))
                               else NA, "transformers not installed")
                continue
            CHECK_FUNCS[name](env, report)
        except BaseException as exc:  # noqa: BLE001 - one check's crash is that check's failure
            if isinstance(exc, KeyboardInterrupt):
                raise
            tb = traceback.format_exc()
            sys.stderr.write(f"[workload] {name} raised:\n{tb}\n")
            del report.checks[n_before:]
            last = [ln for ln in tb.strip().splitlines() if ln.startswith("  File ")][-1:]
            report.add(name, FAILED, f"{type(exc).__name__}: {exc}"[:1500] + (f" ({last[0].strip()})" if last else ""))
        if len(report.checks) > n_before:
            report.checks[-1]["figures"].setdefault("check_seconds", round(time.time() - t0, 2))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-dir", default="/opt/rocmforge/config")
    ap.add_argument("--require-gpu", action="store_true",
                    help="a GPU check that cannot use a GPU fails instead of 'not GPU-verified'")
    ap.add_argument("--expect", action="append", choices=EXPECTABLE, default=[],
                    help="a library the image declares: its absence is a failure (repeatable)")
    ap.add_argument("--only", action="append", choices=CHECKS, help="run only these checks (repeatable)")
    args = ap.parse_args(argv)
    t0 = time.time()
    real_stdout = json_channel()
    report = Report()
    out = {"device": "cpu", "gpu": False, "versions": {}, "checks": report.checks, "overrides": report.overrides}
    try:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        os.environ.setdefault("BITSANDBYTES_NOWELCOME", "1")
        with contextlib.redirect_stdout(sys.stderr):  # belt and braces with json_channel()
            env = Env(args)
            out.update(device=env.device_desc, gpu=env.gpu, versions=env.versions())
            run_checks(env, report, args.only)
    except BaseException as exc:  # noqa: BLE001 - still print a JSON line
        if isinstance(exc, KeyboardInterrupt):
            out["error"] = "interrupted"
        else:
            out["error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
    out["seconds"] = round(time.time() - t0, 2)
    real_stdout.write(json.dumps(out, default=str) + "\n")
    real_stdout.flush()
    failed = "error" in out or any(c["status"] == FAILED for c in report.checks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
