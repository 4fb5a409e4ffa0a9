#!/usr/bin/env python3
"""Workload probe: the seeds' LLM settings and workloads run with this image's own libraries.

Copied into a container and run as
    PYTHON workload.py --config-dir /opt/rocmforge/config [--require-gpu] [--expect NAME ...]
It prints ONE JSON object on its last stdout line (everything else goes to stderr):
    {"device", "gpu", "versions", "checks": [{"name", "status", "detail", "figures"}],
     "overrides", "seconds"}
status is "passed", "failed", "not GPU-verified" or "not applicable". Exit 1 if a check failed.

Standard library at module level, here and in the parts beside it (the unit tests import them
without torch): workload_base.py (environment, report, statuses), workload_settings.py (the
settings files), workload_train.py (train, LoRA, QLoRA), workload_infer.py (inference). torch,
transformers, peft, bitsandbytes and yaml are imported lazily. Runs on Python 3.9 / torch 1.13.1 /
transformers 4.31.0 / peft 0.4.0 up to Python 3.14 / torch 2.14 / transformers 5.x: API
differences are feature-detected, never assumed from a version number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback

# The probe's parts, beside it in the image's probe folder (sys.path[0] when it runs as a script).
from workload_base import FAILED, NA, Env, Report, importable
from workload_infer import check_inference
from workload_settings import check_amp, check_config_yaml, check_training_args
from workload_train import check_lora, check_qlora, check_train

CHECKS = ["settings/training_args.json", "settings/amp.json", "settings/config.yaml",
          "train", "lora", "qlora-4bit", "inference"]
EXPECTABLE = ("transformers", "accelerate", "peft", "bitsandbytes")


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
