"""rocmforge.render.archprune: the build step rendered into the install RUN, the label, and the
summary the manifest, `list` and the report give."""

from __future__ import annotations

from rocmforge.render import archprune
from rocmforge.render.plan import load_plan
from rocmforge.shared import packagedata
from tests.conftest import ROOT


def test_the_prune_runs_in_the_install_run_after_apt_and_before_its_clean_up():
    dockerfile = (ROOT / "images" / "hip-runtime" / "Dockerfile").read_text()
    copy = dockerfile.index("COPY probes/perarch.py probes/gfxnames.py /opt/rocmforge/prune/")
    run = dockerfile.index("RUN ", copy)
    install, prune, clean = (
        dockerfile.index(s, run) for s in ("apt-get install", "perarch.py prune --keep gfx90a,gfx1100", "apt-get clean")
    )
    assert install < prune < clean and dockerfile.count("RUN ", run, clean) == 1
    assert "--record /opt/rocmforge/prune/hip-runtime.json" in dockerfile
    assert "-B /opt/rocmforge/prune/perarch.py" in dockerfile  # no .pyc of the probe in the layer
    assert 'io.rocmforge.archs.pruned="true"' in dockerfile


def test_opting_out_renders_no_prune_and_labels_it(tmp_path):
    text = (ROOT / "matrix.yaml").read_text()
    head, sep, targets = text.partition("\ntargets:\n")
    targets = targets.replace("  hip-runtime:\n", "  hip-runtime:\n    prune_archs: false\n", 1)
    # Variants are pruned images: a target that prunes nothing declares none (the matrix says so).
    targets = "\n".join(line for line in targets.split("\n") if not line.lstrip().startswith("variants:"))
    for name in ("matrix.lock",):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "matrix.yaml").write_text(head + sep + targets)
    tp = load_plan(tmp_path / "matrix.yaml").targets["hip-runtime"]
    dockerfile = tp.files["Dockerfile"].decode()
    assert "perarch.py" not in dockerfile and tp.labels[archprune.LABEL] == "false"
    assert 'io.rocmforge.archs.pruned="false"' in dockerfile


def test_records_summarise_and_describe():
    records = archprune.parse_records(
        '{"keep": ["gfx1100", "gfx90a"], "removed_files": 3, "removed_bytes": 1060000000}\n\n'
        '{"keep": ["gfx1100", "gfx90a"], "removed_files": 1, "removed_bytes": 5}\n'
    )
    summary = archprune.summary(True, records)
    assert summary == {"pruned": True, "archs": ["gfx1100", "gfx90a"], "removed_files": 4, "removed_bytes": 1060000005}
    assert archprune.summary(True, records + [{"keep": ["gfx90a"]}])["archs"] == ["gfx90a"]
    assert archprune.describe(True, summary) == "pruned, 1.06 GB saved"
    assert archprune.describe(True, None) == "pruned"
    assert archprune.describe(False, None) == "not pruned"


def test_the_step_skips_images_without_gpu_data_folders_and_its_patterns_cover_the_probes_rule():
    import fnmatch

    perarch = packagedata.probe("perarch")
    assert archprune.ROOTS == perarch.DEFAULT_ROOTS
    for folder in (
        "/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library",
        "/opt/rocm-6.4.3/lib/rocblas/library",
        "/usr/lib/x86_64-linux-gnu/hipblaslt/library",
        "/opt/conda/lib/python3.10/site-packages/torch/lib/rocblas/library",
        "/opt/rocm/share/miopen/db",
    ):
        assert perarch.data_dir_kind(folder)
        assert any(fnmatch.fnmatch(folder, p) for p in archprune.DATA_DIR_PATTERNS), folder
    cmd = archprune.command("x", ["gfx90a"], "/usr/bin/python3")
    assert cmd.startswith('if [ -n "$(find /usr/lib /usr/local/lib /usr/share /opt -type d ') and cmd.endswith("; fi")
