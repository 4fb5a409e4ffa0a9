#!/usr/bin/env python3
"""What every check of the workload probe shares: what the image's torch sees (device, GPU, library
versions), the check statuses, the report every check adds to, and the tiny model's size.

Standard library at module level (torch is imported inside, and its absence reported); part of the
workload probe (workload.py)."""

from __future__ import annotations

import json
import os
import sys


PASSED, FAILED, NOT_GPU, NA = "passed", "failed", "not GPU-verified", "not applicable"


# The tiny model every workload uses: random weights, nothing downloaded, no tokenizer.
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, vocab_size=256, max_position_embeddings=128)
SEQ_LEN = 32
TRAIN_STEPS = 30
TRAIN_LR = 3e-3          # the seeds' 4e-5 / 6e-5 barely move a random tiny model in 30 steps
LORA_STEPS = 30
LORA_LR = 1e-2           # LoRA adapts a briefly pre-trained tiny model to a new pattern (stride 3)
LORA_TASK_STEP = 3


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


def gpu_note(env, report, name, status, detail, figures):
    """A CPU-capable check: on a host without GPU it may pass on the CPU, unless --require-gpu."""
    if status == PASSED and env.require_gpu and not env.gpu:
        return report.add(name, FAILED, env.no_gpu_reason(f"ran on the CPU only ({detail})"), figures)
    report.add(name, status, detail, figures)


