#!/usr/bin/env python3
"""The seeds' settings files against the image's own libraries: training_args.json against the
installed TrainingArguments, amp.json against GradScaler and AdamW, config.yaml against what
bitsandbytes accepts on this backend. The pure checks are unit-tested without torch.

Part of the workload probe (workload.py)."""

from __future__ import annotations

import dataclasses
import glob
import inspect
import os
import tempfile

# The probe's parts, beside it in the image's probe folder (sys.path[0] when it runs as a script).
from workload_base import FAILED, NA, PASSED, TINY, TRAIN_LR, TRAIN_STEPS, importable, load_json, load_yaml


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


