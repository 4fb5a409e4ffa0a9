"""The pure parts of issue 38's "the image as users run it", "the loader's truth" and "full
versions": the config a Dockerfile's final stage gives an image (suites/test_config.py), the
steering-variable table, the ELF SONAME reader and the loader's choice (probes/load.py --resolve),
and HIP versions sorted by kind (suites/test_versions.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest

from rocmforge.render.plan import load_plan
from rocmforge.resolve import bootstrap
from rocmforge.shared.packagedata import PROBES
from tests.conftest import ROOT

with warnings.catch_warnings():  # their markers are registered by the suites' conftest, not here
    warnings.simplefilter("ignore")
    from rocmforge.data.suites import predicted_config as cfg
    from rocmforge.data.suites import test_linkage, test_versions

FIX = ROOT / "tests" / "fixtures" / "load"
BOOT = {
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "Cmd": ["bash"],
    "Labels": {"io.rocmforge.base": "s"},
}


# -- the config a final stage makes --------------------------------------------------------------
def test_words_quote_and_substitute_as_the_builder_does():
    scope = {"PATH": "/bin", "X": "x"}
    assert cfg.words("a=1 b=\"two words\" c='$X' d=$X e=${X}y f=${NOPE:-dflt} g=${X:+set}", scope) == [
        "a=1",
        "b=two words",
        "c=$X",
        "d=x",
        "e=xy",
        "f=dflt",
        "g=set",
    ]
    assert cfg.words(r"p=/opt/bin:$PATH q=a\ b", scope) == ["p=/opt/bin:/bin", "q=a b"]
    # Inside double quotes only ", $ and \ are escaped: a rendered \u0027 stays as it is.
    assert cfg.words(r'd="Seed 000\u0027s \"q\" \$X"', scope) == [r'd=Seed 000\u0027s "q" $X']
    with pytest.raises(ValueError, match="unterminated"):
        cfg.words('a="open', scope)


def test_final_stage_on_the_base_config():
    dockerfile = """FROM base AS build
WORKDIR /src
ENV BUILDER_ONLY=1
FROM base
SHELL ["/bin/bash", "-c"]
ARG V=7
ENV PATH=/opt/bin:$PATH \\
    A="x y" B=$V
ENV OLD legacy form
LABEL l1="one" l2=$V
WORKDIR /work
WORKDIR sub
USER app
"""
    got = cfg.expected_config(dockerfile, BOOT, {"io.rocmforge.content-hash": "h"})
    assert cfg.env_dict(got) == {
        "PATH": "/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "A": "x y",
        "B": "7",
        "OLD": "legacy form",
    }
    assert got["Labels"] == {"io.rocmforge.base": "s", "l1": "one", "l2": "7", "io.rocmforge.content-hash": "h"}
    assert (got["WorkingDir"], got["User"], got["Cmd"], got["Shell"]) == (
        "/work/sub",
        "app",
        ["bash"],
        ["/bin/bash", "-c"],
    )


def test_entrypoint_drops_the_inherited_cmd_and_shell_form_uses_shell():
    got = cfg.apply_stage(BOOT, ['SHELL ["/bin/bash", "-c"]', "ENTRYPOINT run.sh --x"])
    assert got["Entrypoint"] == ["/bin/bash", "-c", "run.sh --x"] and got["Cmd"] is None
    got = cfg.apply_stage(BOOT, ['CMD ["a"]', 'ENTRYPOINT ["/e"]'])
    assert got["Entrypoint"] == ["/e"] and got["Cmd"] == ["a"]


def test_an_unmodelled_instruction_fails_rather_than_guesses():
    with pytest.raises(ValueError, match="EXPOSE 8080"):
        cfg.apply_stage(BOOT, ["EXPOSE 8080"])


def test_differences_name_the_field_and_both_values():
    want = cfg.apply_stage(BOOT, ["ENV A=1"])
    have = {
        **want,
        "Env": want["Env"] + ["HIP_VISIBLE_DEVICES=1"],
        "User": "nobody",
        "WorkingDir": "/tmp",
        "Entrypoint": ["/bin/true"],
        "Labels": {**want["Labels"], "io.rocmforge.content-hash": "b"},
    }
    want["Labels"]["io.rocmforge.content-hash"] = "a"
    diff = cfg.config_differences(want, have)
    assert 'Env HIP_VISIBLE_DEVICES: the image has "1", the matrix renders none' in diff
    assert 'User: the image has "nobody", the matrix renders none' in diff
    assert 'WorkingDir: the image has "/tmp", the matrix renders none' in diff
    assert 'Entrypoint: the image has ["/bin/true"], the matrix renders none' in diff
    assert any(
        d.startswith(
            'Labels io.rocmforge.content-hash: the image has "b", the matrix renders "a" (the image '
            "was built from other inputs"
        )
        for d in diff
    )
    assert cfg.config_differences(want, {**want, "WorkingDir": "", "Volumes": None}) == []


@pytest.mark.parametrize("target", ["hip-runtime", "hip-python", "llama31-qlora-debian"])
def test_rendered_targets_expect_their_paths_and_labels(target):
    """The real rendered Dockerfiles, on the real bootstrapped base config."""
    plan = load_plan(ROOT / "matrix.yaml")
    chain, name = [], target
    while name:
        chain.append(name)
        name = plan.matrix.targets[name].from_target
    stack = plan.matrix.stacks[plan.targets[chain[-1]].stack]
    conf = json.loads(bootstrap.image_config("sha256:" + "0" * 64, plan.targets[chain[-1]].stack, stack))["config"]
    for name in reversed(chain):
        conf = cfg.expected_config(
            plan.targets[name].files["Dockerfile"].decode(),
            conf,
            {"io.rocmforge.content-hash": plan.targets[name].content_hash},
        )
    env = cfg.env_dict(conf)
    assert env["PATH"].endswith(":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    assert conf["Labels"]["io.rocmforge.target"] == target and conf["Cmd"] == ["bash"]
    assert conf["Labels"]["io.rocmforge.content-hash"] == plan.targets[target].content_hash
    assert conf["Labels"]["org.opencontainers.image.title"] == target
    if target == "llama31-qlora-debian":
        assert env["USE_LIBUV"] == "0" and env["PIP_CONSTRAINT"].startswith("/opt/rocmforge/constraints/")


# -- the steering-variable table -----------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "HSA_OVERRIDE_GFX_VERSION",
        "HSA_XNACK",
        "HIP_PLATFORM",
        "ROCBLAS_TENSILE_LIBPATH",
        "MIOPEN_FIND_MODE",
        "HIPBLASLT_LOG_LEVEL",
        "TENSILE_DB",
        "AMD_LOG_LEVEL",
        "ROCM_PATH",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTORCH_ROCM_ARCH",
        "BNB_CUDA_VERSION",
    ],
)
def test_steering_variables_are_in_the_table(name):
    assert cfg.steering(name), name


@pytest.mark.parametrize("name", ["PATH", "PIP_CONSTRAINT", "USE_LIBUV", "HOME", "LANG", "HOSTNAME"])
def test_other_variables_are_not(name):
    assert cfg.steering(name) is None


def test_table_patterns_are_unique_and_explained():
    patterns = [p for p, _ in cfg.STEERING]
    assert len(patterns) == len(set(patterns)) and all(why for _, why in cfg.STEERING)


def test_undeclared_steering_is_named_declared_passes():
    env = {"PATH": "/bin", "HIP_VISIBLE_DEVICES": "1", "ROCM_PATH": "/opt/rocm"}
    bad = cfg.undeclared_steering(env, {"PATH": "base", "ROCM_PATH": "stack s env"})
    assert bad == [
        "HIP_VISIBLE_DEVICES='1': steers which GPUs HIP programs see (an iGPU mix is the host's "
        "business: `run` sets it); the matrix declares no HIP_VISIBLE_DEVICES (neither a stack's env "
        "nor a component sets it)"
    ]


# -- the ELF SONAME reader and the loader's choice -------------------------------------------------
def _probe_module():
    sys.path.insert(0, str(PROBES))
    try:
        import load
    finally:
        sys.path.remove(str(PROBES))
    return load


def test_soname_read_from_the_dynamic_section():
    load = _probe_module()
    assert load.elf_soname(str(FIX / "good" / "libhipx.so.6")) == "libhipx.so.6"
    assert load.elf_soname(str(FIX / "libundefined.so")) is None  # linked without -soname
    assert load.elf_soname(str(FIX / "prog-needs-gone")) is None  # a program
    assert load.elf_soname(str(FIX / "generate.sh")) is None  # not ELF
    libc = next(
        (p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6") if os.path.exists(p)),
        None,
    )
    if libc:
        assert load.elf_soname(libc) == "libc.so.6"


def _resolve(*paths, ld_path=""):
    env = {**os.environ, "LD_LIBRARY_PATH": ld_path}
    proc = subprocess.run(
        [sys.executable, str(PROBES / "load.py"), "--resolve", *map(str, paths)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_loader_choice_private_found_and_shadowed(tmp_path):
    lib = FIX / "good" / "libhipx.so.6"
    private = _resolve(lib)[str(lib)]
    assert private["soname"] == "libhipx.so.6" and not private["on_loader_path"] and private["resolved"] is None
    assert test_linkage.loader_problems({str(lib): private}) == []
    found = _resolve(lib, ld_path=str(FIX / "good"))[str(lib)]
    assert found["on_loader_path"] and found["resolved"] == str(lib)
    assert test_linkage.loader_problems({str(lib): found}) == []
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    shutil.copy(FIX / "replaced" / "libhipx.so.6", shadow / "libhipx.so.6")
    got = _resolve(lib, ld_path=f"{shadow}:{FIX / 'good'}")
    assert test_linkage.loader_problems(got) == [
        f"libhipx.so.6: the loader picks {shadow / 'libhipx.so.6'}, but the image's package installed {lib}"
    ]
    assert set(_resolve(FIX / "libundefined.so", FIX / "prog-needs-gone")) == set()  # no SONAME: left out


def test_a_soname_the_loader_cannot_open_in_its_own_folder_is_named():
    choice = {
        "/usr/lib/libx.so.1.2": {
            "soname": "libx.so.1",
            "resolved": None,
            "on_loader_path": True,
            "error": "libx.so.1: cannot open shared object file",
        }
    }
    assert test_linkage.loader_problems(choice) == [
        "libx.so.1: the loader cannot open it by its SONAME although /usr/lib/libx.so.1.2 is in a folder it "
        "searches: libx.so.1: cannot open shared object file"
    ]


# -- HIP versions by kind ---------------------------------------------------------------------------
def test_hip_versions_sorted_by_kind():
    R, V = test_versions.RUNTIME, test_versions.RELEASE
    assert test_versions.dpkg_hip_versions("libamdhip64-5", "5.7.1-6+deb13u1") == {"dpkg libamdhip64-5": ("5.7.1", V)}
    assert test_versions.dpkg_hip_versions("libamdhip64-6", "6.4.3-5") == {"dpkg libamdhip64-6": ("6.4.3", V)}
    assert test_versions.dpkg_hip_versions("hip-runtime-amd", "5.7.31921.50701-98~20.04") == {
        "dpkg hip-runtime-amd": ("5.7.31921", R),
        "dpkg hip-runtime-amd (ROCm release)": ("5.7.1", V),
    }
    assert test_versions.release_numbers("5.7.31921-0") == (5, 7, 31921)
    assert test_versions.release_numbers("1:5.7") == (5, 7, 0)
    assert test_versions.release_numbers("garbage") is None
