"""The packages an image must hold, from matrix.lock alone (rocmforge.resolve.image_packages), on the
committed matrix and lock, and the comparison with an installed set."""

from __future__ import annotations

from rocmforge.define.matrix import load_matrix
from rocmforge.resolve import lockfile
from rocmforge.resolve.image_packages import ExpectedPackages, compare, expected_packages, parse_dpkg_status
from rocmforge.resolve.lockmodel import BaseEntry
from tests.conftest import ROOT

MATRIX = load_matrix(ROOT / "matrix.yaml")
LOCK = lockfile.load(ROOT / "matrix.lock")


def test_bootstrapped_image_is_its_base_plus_its_chains_closures():
    seed = expected_packages(LOCK, MATRIX, "llama31-qlora-debian")
    base = LOCK.bases["debian-sid-rocm6.4"].packages
    torch_step = LOCK.apt["hip64-torch"]
    assert seed.base_locked and seed.unlocked_steps == ()
    assert seed.packages == {**base, **torch_step}  # llama31-qlora-debian installs no apt of its own
    assert seed.packages["libhipsparse1"] == "6.4.3-1" and seed.sources["libhipsparse1"] == "apt hip64-torch"
    assert seed.sources["bash"] == "base debian-sid-rocm6.4"


def test_builder_stages_do_not_reach_the_image():
    runtime = expected_packages(LOCK, MATRIX, "hip-runtime")
    assert "hipcc" not in runtime.packages  # hip-devel is its builder, not its base
    python = expected_packages(LOCK, MATRIX, "hip-python")
    assert "python3-pip" not in python.packages  # only numpy-env's builder stage installs it
    assert python.packages == runtime.packages  # hip-python's own step adds nothing (python3 is there)


def test_registry_base_locked_before_its_packages_is_not_judged_for_extras():
    e = expected_packages(LOCK, MATRIX, "llama7b-train")
    assert not e.base_locked and e.unlocked_steps == ("llama7b-train",)
    assert not compare(e, {"anything": "1"})


def test_registry_base_with_its_packages_locked_is_judged_whole():
    stack = MATRIX.targets["llama7b-train"].stack
    lock = LOCK.model_copy(
        update={
            "bases": {
                **LOCK.bases,
                stack: BaseEntry(
                    kind="registry",
                    digest="sha256:" + "0" * 64,
                    packages={"rocblas": "3.1.0.50701-98~20.04", "bash": "5.0"},
                ),
            },
            "apt": {**LOCK.apt, "llama7b-train": {"rccl": "2.17.1.50701-98~20.04"}},
        }
    )
    e = expected_packages(lock, MATRIX, "llama7b-train")
    assert e.base_locked and e.unlocked_steps == ()
    assert e.sources == {"bash": f"base {stack}", "rccl": "apt llama7b-train", "rocblas": f"base {stack}"}
    diff = compare(e, {"bash": "5.0", "rocblas": "3.1.0.50701-98~20.04", "vim": "2"})
    assert diff.lines() == [
        "missing (in the lock's closure, not installed): rccl=2.17.1.50701-98~20.04 (apt llama7b-train)",
        "extra (installed, not in the lock's closure): vim=2",
    ]


def test_compare_names_missing_wrong_and_extra():
    e = ExpectedPackages({"a": "1", "b": "2"}, True, (), {"a": "base x", "b": "apt y"})
    diff = compare(e, {"a": "1", "b": "3", "c": "9"})
    assert diff.lines() == [
        "wrong version: b: lock 2, installed 3 (apt y)",
        "extra (installed, not in the lock's closure): c=9",
    ]
    assert compare(e, {"a": "1"}).lines() == ["missing (in the lock's closure, not installed): b=2 (apt y)"]
    assert not compare(e, {"a": "1", "b": "2"})


def test_dpkg_status_keeps_only_installed_packages():
    text = "ii \tbash\t5.3-4\nrc \tlibhipsparse1\t6.4.3-1\niU \tx\t1\nii \tlibc6:amd64\t2.41\n"
    assert parse_dpkg_status(text) == {"bash": "5.3-4", "libc6": "2.41"}
