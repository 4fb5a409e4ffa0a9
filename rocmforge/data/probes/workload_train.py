#!/usr/bin/env python3
"""Training with the seeds' settings on a tiny random LLaMA: Trainer (seed 000), the AMP loop
(seed 004), LoRA and 4-bit QLoRA through bitsandbytes; each check proves that the loss falls.

Part of the workload probe (workload.py)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time

# The probe's parts, beside it in the image's probe folder (sys.path[0] when it runs as a script).
from workload_base import (FAILED, LORA_LR, LORA_STEPS, LORA_TASK_STEP, NA, PASSED, SEQ_LEN, TINY, TRAIN_LR,
                           TRAIN_STEPS, Report, gpu_note, importable, load_json)
from workload_settings import (accepted_keys, bnb_native_libs, expected_bnb_library, make_grad_scaler,
                               training_args_kwargs)


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


