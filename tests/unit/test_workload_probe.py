"""The workload probe's settings checks, pure and fast: no torch or transformers needed on the host.

The probe (probes/workload.py) is copied into images and run there by tests/suites/test_workload.py;
here its helpers are imported (as the image imports them) and fed stand-ins for the libraries' classes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from rocmforge.shared import packagedata
from rocmforge.shared.packagedata import PROBES

PROBE = PROBES / "workload.py"

SEED000_TRAINING_ARGS = {
    "output_dir": "./results_qlora",
    "num_train_epochs": 1,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 2,
    "optim": "paged_adamw_32bit",
    "save_steps": 50,
    "logging_steps": 50,
    "learning_rate": 4e-05,
    "weight_decay": 0.001,
    "fp16": False,
    "bf16": True,
    "max_grad_norm": 0.3,
    "max_steps": -1,
    "warmup_ratio": 0.03,
    "group_by_length": True,
    "lr_scheduler_type": "constant",
    "report_to": "tensorboard",
}
SEED004_AMP = {
    "torch.backends.cuda.matmul.allow_tf32": False,
    "torch.backends.cudnn.allow_tf32": False,
    "grad_scaler": {"init_scale": 1024.0, "growth_factor": 1.5, "backoff_factor": 0.5, "growth_interval": 200},
    "optimizer": {"name": "AdamW", "lr": 6e-05, "betas": [0.9, 0.98], "eps": 1e-06, "weight_decay": 0.01},
    "max_grad_norm": 1.0,
    "gradient_checkpointing": True,
    "flash_attention": False,
    "batch_first": True,
}
SEED004_CONFIG = {
    "engine": {"max_batch_size": 8, "max_seq_length": 2048, "beam_width": 4, "enable_fp8": False},
    "quantization": {"weight_bits": 4, "group_size": 64, "zero_point": True},
    "scheduling": {"timeout_ms": 5000, "prefill_chunk_size": 512, "max_active_adapters": 8},
}


# The probe and its parts, imported as the image's python3 imports them: by bare name, from one folder.
workload = packagedata.probe("workload")
settings = packagedata.probe("workload_settings")
train = packagedata.probe("workload_train")
infer = packagedata.probe("workload_infer")


@dataclasses.dataclass
class TrainingArguments:
    """Stand-in for transformers 5.24's TrainingArguments: no warmup_ratio, no group_by_length."""

    output_dir: str = "out"
    num_train_epochs: float = 3.0
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    optim: str = "adamw_torch"
    save_steps: float = 500
    logging_steps: float = 500
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    fp16: bool = False
    bf16: bool = False
    max_grad_norm: float = 1.0
    max_steps: int = -1
    warmup_steps: float = 0
    lr_scheduler_type: str = "linear"
    report_to: str = "none"
    use_cpu: bool = False
    _n_gpu: int = dataclasses.field(init=False, default=0)


def test_probe_imports_without_heavy_libraries():
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(PROBES)!r})\n"
        "import workload, workload_base, workload_settings, workload_train, workload_infer\n"
        "heavy = [n for n in ('torch', 'transformers', 'peft', 'bitsandbytes', 'yaml') if n in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_check_names_fixed():
    assert workload.CHECKS == [
        "settings/training_args.json",
        "settings/amp.json",
        "settings/config.yaml",
        "train",
        "lora",
        "qlora-4bit",
        "inference",
    ]
    assert set(workload.CHECK_FUNCS) == set(workload.CHECKS)


def test_accepted_keys_skip_non_init_fields():
    keys = settings.accepted_keys(TrainingArguments)
    assert "warmup_steps" in keys and "use_cpu" in keys and "_n_gpu" not in keys


def test_unknown_training_args_keys_name_key_file_and_version():
    msgs = settings.rejected_training_args(
        SEED000_TRAINING_ARGS, TrainingArguments, "5.24.0", "/opt/rocmforge/config/training_args.json"
    )
    assert msgs == [
        "/opt/rocmforge/config/training_args.json: key 'warmup_ratio' is not accepted by transformers 5.24.0's "
        "TrainingArguments",
        "/opt/rocmforge/config/training_args.json: key 'group_by_length' is not accepted by transformers 5.24.0's "
        "TrainingArguments",
    ]


def test_accepted_keys_from_a_signature():
    class Old:  # transformers 4.x style: a plain __init__
        def __init__(self, output_dir, warmup_ratio=0.0, group_by_length=False, no_cuda=False, **kwargs):
            pass

    assert settings.rejected_training_args({"warmup_ratio": 0.03, "group_by_length": True}, Old, "4.31.0") == []
    assert "use_cpu" in settings.rejected_training_args({"use_cpu": True}, Old, "4.31.0")[0]


def test_seed004_amp_is_clean():
    assert settings.amp_problems(SEED004_AMP, "amp.json") == []


def test_amp_unknown_keys_named():
    bad = json.loads(json.dumps(SEED004_AMP))
    bad["loss_scale"] = 128
    bad["grad_scaler"]["min_scale"] = 1.0
    bad["optimizer"]["momentum"] = 0.9
    msgs = settings.amp_problems(bad, "/opt/rocmforge/config/amp.json")
    assert len(msgs) == 3
    assert all(m.startswith("/opt/rocmforge/config/amp.json: ") for m in msgs)
    joined = " ".join(msgs)
    assert "'loss_scale'" in joined and "'grad_scaler.min_scale'" in joined and "'optimizer.momentum'" in joined


def test_amp_checks_against_installed_signatures():
    # A newer torch that added a GradScaler keyword: accepted when the installed class takes it.
    s = dict(SEED004_AMP, grad_scaler=dict(SEED004_AMP["grad_scaler"], fancy=1))
    assert (
        settings.amp_problems(
            s, "amp.json", scaler_keys={"init_scale", "growth_factor", "backoff_factor", "growth_interval", "fancy"}
        )
        == []
    )
    assert settings.amp_problems(dict(SEED004_AMP, optimizer={"name": "SGD", "lr": 1}), "amp.json")


def test_seed004_group_size_64_rejected_on_hip():
    msgs = settings.config_problems(SEED004_CONFIG, hip=True, filename="config.yaml")
    assert len(msgs) == 1
    assert "group_size 64" in msgs[0] and "HIP" in msgs[0] and "128" in msgs[0]


def test_group_size_64_fine_off_hip_and_128_fine_on_hip():
    assert settings.config_problems(SEED004_CONFIG, hip=False) == []
    ok = json.loads(json.dumps(SEED004_CONFIG))
    ok["quantization"]["group_size"] = 128
    assert settings.config_problems(ok, hip=True) == []
    ok["quantization"]["group_size"] = 100
    assert settings.config_problems(ok, hip=False)


def test_config_declares_hip():
    assert not settings.config_declares_hip(SEED004_CONFIG)
    assert settings.config_declares_hip(dict(SEED004_CONFIG, backend="rocm"))
    assert settings.config_declares_hip({"engine": {"backend": "HIP"}})


def test_config_unknown_keys():
    bad = json.loads(json.dumps(SEED004_CONFIG))
    bad["engine"]["tensor_parallel"] = 2
    bad["extras"] = {}
    msgs = settings.config_problems(bad, hip=False, filename="c.yaml")
    assert any("'engine.tensor_parallel'" in m for m in msgs) and any("'extras'" in m for m in msgs)


def test_loss_falls():
    assert train.loss_falls([5.5, 5.4, 5.3, 4.0, 3.0, 2.0, 1.0, 0.9])[0]
    assert not train.loss_falls([5.5, 5.5, 5.49, 5.5, 5.48, 5.49, 5.5, 5.47])[0]
    ok, why = train.loss_falls([5.5, float("nan"), 1.0, 0.5, 0.4])
    assert not ok and "non-finite" in why
    assert not train.loss_falls([1.0, 0.5])[0]


def test_expected_bnb_library():
    assert settings.expected_bnb_library("5.7.31921-d1770ee1b", None) == "libbitsandbytes_rocm57"
    assert settings.expected_bnb_library("6.2.41133", None) == "libbitsandbytes_rocm62"
    assert settings.expected_bnb_library(None, "12.1") == "libbitsandbytes_cuda121"
    assert settings.expected_bnb_library(None, None) == "libbitsandbytes_cpu"


def test_no_torch_still_prints_one_json_line(tmp_path):
    """In an interpreter without torch the probe fails every check but still ends with its JSON line."""
    code = (
        "import sys; sys.modules['torch'] = None\n"  # makes `import torch` raise ImportError
        f"sys.argv = ['workload.py', '--config-dir', {str(tmp_path)!r}]\n"
        f"sys.path.insert(0, {str(PROBES)!r})\n"  # as when the image runs the file as a script
        f"import runpy; runpy.run_path({str(PROBE)!r}, run_name='__main__')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert [c["name"] for c in data["checks"]] == [
        "settings/training_args.json",
        "settings/amp.json",
        "settings/config.yaml",
        "train",
        "lora",
        "qlora-4bit",
        "inference",
    ]
    assert all(c["status"] == "failed" and "torch does not import" in c["detail"] for c in data["checks"])
    assert data["gpu"] is False and data["device"] == "cpu"


# -- inference: a model whose next tokens are known (issue 25 item 6) -------------------------------


def test_counting_prompts_count_and_wrap():
    prompts = infer.counting_prompts(8, 8)
    assert len(prompts) == 8 and all(len(p) == 8 for p in prompts)
    assert prompts[0] == [60, 61, 62, 63, 0, 1, 2, 3]  # the first row wraps around the vocabulary
    for p in prompts:
        assert all(b == (a + 1) % infer.COUNT_VOCAB for a, b in zip(p, p[1:]))
    assert infer.counting_prompts(8, 8) == prompts  # the same prompts every run


def _counted(prompt, n, vocab=64):
    return prompt + [(prompt[-1] + 1 + k) % vocab for k in range(n)]


def test_the_count_continued_exactly_passes():
    prompts = infer.counting_prompts(3, 8)
    assert infer.continuation_problems(prompts, [_counted(p, 16) for p in prompts], 16) == []


def test_no_new_tokens_fails_naming_the_count():
    prompts = infer.counting_prompts(2, 8)
    msgs = infer.continuation_problems(prompts, prompts, 16)
    assert msgs == [
        "row 0: 0 new tokens, want exactly max_new_tokens=16",
        "row 1: 0 new tokens, want exactly max_new_tokens=16",
    ]


def test_too_few_or_too_many_new_tokens_fail():
    p = infer.counting_prompts(1, 8)
    assert "15 new tokens" in infer.continuation_problems(p, [_counted(p[0], 15)], 16)[0]
    assert "17 new tokens" in infer.continuation_problems(p, [_counted(p[0], 17)], 16)[0]


def test_a_wrong_token_is_named_with_its_position():
    p = infer.counting_prompts(1, 8)
    row = _counted(p[0], 16)
    row[8 + 5] = 0 if row[8 + 5] else 1  # the 6th new token is off
    msg = infer.continuation_problems(p, [row], 16)[0]
    assert msg.startswith("row 0: new token 5 is ") and "the count says" in msg


def test_output_that_lost_its_prompt_or_rows_fails():
    p = infer.counting_prompts(2, 8)
    assert "does not start with its prompt" in infer.continuation_problems(p, [_counted(p[1], 16)] * 2, 16)[0]
    assert infer.continuation_problems(p, [_counted(p[0], 16)], 16) == ["1 output rows for 2 prompts"]


# -- group_size: on a GPU host the backend's own answer decides ---------------------------------------


def test_backend_answer_decides_group_size():
    seed = SEED004_CONFIG  # group_size 64
    assert settings.config_problems(seed, hip=True, backend_answer=(True, "accepted")) == []
    msgs = settings.config_problems(
        dict(seed, quantization=dict(seed["quantization"], group_size=128)),
        hip=True,
        backend_answer=(False, "AssertionError: blocksize 128 not supported"),
    )
    assert len(msgs) == 1 and "group_size 128 is rejected by bitsandbytes itself: AssertionError" in msgs[0]
    # without an answer (no GPU) the known block sizes still judge it
    assert settings.config_problems(seed, hip=True, backend_answer=None)
