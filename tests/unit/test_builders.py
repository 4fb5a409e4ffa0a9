"""The builder choice (`build --builder`, $ROCMFORGE_BUILDER) is made in one place and refused in one
line before the engine is reached; BuildKit's CLI is run and read as the classic builder's stream
(a stand-in `docker` plays buildx here); and what BuildKit commits for a step that changed no file
is normalised to what the classic builder records (tests/integration/test_builders.py builds both)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmforge.assemble.image.layers import LayerResult
from rocmforge.assemble.image.lowerrules import CanonicalResult
from rocmforge.assemble.image.rewrite import BUILDKIT_STEP, EMPTY_TAR, without_empty_layers
from rocmforge.host import builders
from rocmforge.shared.errors import UserError
from tests.conftest import copy_project, run_cli
from tests.unit.test_bad_cli import DEAD_ENGINE

FOUND = builders.Buildx("/usr/bin/docker", "github.com/docker/buildx 0.29.1")


@pytest.fixture
def no_choice(monkeypatch):
    monkeypatch.delenv(builders.ENV, raising=False)
    monkeypatch.delenv("DOCKER_BUILDKIT", raising=False)


def test_auto_is_the_default_and_classic_asks_nothing(no_choice, monkeypatch):
    monkeypatch.setattr(builders.Buildx, "find", classmethod(lambda cls: FOUND))
    assert builders.choose(None) == builders.Chosen(builders.BUILDKIT, FOUND, "auto", "$ROCMFORGE_BUILDER")
    monkeypatch.setattr(builders.Buildx, "find", classmethod(lambda cls: None))
    assert builders.choose(None) == builders.Chosen(builders.CLASSIC)
    monkeypatch.setattr(builders.Buildx, "find", classmethod(lambda cls: pytest.fail("buildx looked for")))
    assert builders.choose("classic").name == builders.CLASSIC


@pytest.mark.parametrize("found", [FOUND, None])
def test_auto_is_buildkit_where_buildx_is_found(no_choice, monkeypatch, found):
    monkeypatch.setattr(builders.Buildx, "find", classmethod(lambda cls: found))
    want = builders.Chosen(builders.BUILDKIT, FOUND, "auto") if found else builders.Chosen(builders.CLASSIC)
    assert builders.choose("auto") == want
    monkeypatch.setenv(builders.ENV, "auto")
    assert builders.choose(None) == (dataclasses.replace(want, where="$ROCMFORGE_BUILDER") if found else want)
    assert builders.choose("classic").name == builders.CLASSIC  # the option wins over the variable


def test_buildkit_without_buildx_says_how_to_install_it(no_choice, monkeypatch):
    monkeypatch.setattr(builders.Buildx, "find", classmethod(lambda cls: None))
    with pytest.raises(UserError) as raised:
        builders.choose("buildkit")
    assert raised.value.field == "--builder" and "cli-plugins" in str(raised.value)
    monkeypatch.setenv(builders.ENV, "BuildKit")
    with pytest.raises(UserError) as raised:
        builders.choose(None)
    assert raised.value.field == "$ROCMFORGE_BUILDER"


PODMAN = SimpleNamespace(context=None, described=SimpleNamespace(podman=True, name="Podman Engine", version="5.8.0"))
DOCKER = SimpleNamespace(context=None, described=SimpleNamespace(podman=False, name="Docker Engine", version="28.5.2"))


def test_podman_builds_classic_under_auto_and_refuses_buildkit_by_name(no_choice, monkeypatch):
    """podman's API has no BuildKit session: buildx's docker driver cannot build there. `auto` is the
    classic builder's API on podman (buildah behind it); `buildkit`, asked for by name, is refused
    before any build, naming where it was asked for and what to give instead."""
    monkeypatch.setattr(builders.Buildx, "find", classmethod(lambda cls: FOUND))
    assert isinstance(builders.choose("auto").on(PODMAN), builders.ClassicBuilder)  # type: ignore[arg-type]
    assert isinstance(builders.choose("auto").on(DOCKER), builders.BuildKitBuilder)  # type: ignore[arg-type]
    assert isinstance(builders.choose("buildkit").on(DOCKER), builders.BuildKitBuilder)  # type: ignore[arg-type]
    for given, where, says in (
        ("buildkit", "--builder", "give --builder classic or --builder auto"),
        (None, "$ROCMFORGE_BUILDER", "set $ROCMFORGE_BUILDER to classic or auto"),
    ):
        monkeypatch.setenv(builders.ENV, "buildkit")
        with pytest.raises(UserError) as raised:
            builders.choose(given).on(PODMAN)  # type: ignore[arg-type]
        assert raised.value.field == where
        assert "Podman Engine 5.8.0 has no BuildKit" in str(raised.value) and says in str(raised.value)


def test_docker_buildkit_0_turns_auto_to_the_classic_builder(no_choice, monkeypatch):
    """As Docker's CLI reads it: DOCKER_BUILDKIT=0 is a user's "no BuildKit"; only `auto` defers to it."""
    monkeypatch.setattr(builders.Buildx, "find", classmethod(lambda cls: FOUND))
    monkeypatch.setenv("DOCKER_BUILDKIT", "0")
    assert builders.choose(None) == builders.Chosen(builders.CLASSIC)
    assert builders.choose("buildkit").name == builders.BUILDKIT  # asked for by name: taken
    monkeypatch.setenv("DOCKER_BUILDKIT", "1")
    assert builders.choose(None).name == builders.BUILDKIT


def test_a_docker_that_is_not_dockers_buildx_is_no_buildx(tmp_path, monkeypatch):
    """podman-docker's `docker` answers `docker buildx version` with buildah's words: not buildx."""
    monkeypatch.setenv("PATH", f"{fake_docker(tmp_path / 'bin', 'echo buildah 1.39.3').parent}:{os.environ['PATH']}")
    assert builders.Buildx.find() is None


def test_a_finished_buildx_whose_image_the_engine_lacks_is_an_error_naming_the_builder(tmp_path, monkeypatch):
    """buildx built on another engine than rocmforge reached (another context or DOCKER_HOST): the
    stream ends in an error naming the tag and buildx's builder, not in an image ID of nothing."""
    script = 'if [ "$2" = version ]; then echo github.com/docker/buildx 0.29.1; exit 0; fi\ncat > /dev/null\n'
    monkeypatch.setenv("PATH", f"{fake_docker(tmp_path / 'bin', script).parent}:{os.environ['PATH']}")
    engine = SimpleNamespace(context=None, shown_id=lambda tag: None)
    kit = builders.BuildKitBuilder(engine=engine, buildx=builders.Buildx.find())  # type: ignore[arg-type]
    chunks = list(kit.build(io.BytesIO(b"TAR"), tag="t:1", labels={}, buildargs={}, nocache=False))
    assert not any("aux" in c for c in chunks)
    assert "has no t:1" in chunks[-1]["error"] and "'default'" in chunks[-1]["error"]


@pytest.mark.parametrize("where", ["option", "variable"])
def test_an_unknown_builder_is_refused(no_choice, monkeypatch, where):
    if where == "variable":
        monkeypatch.setenv(builders.ENV, "kaniko")
    with pytest.raises(UserError) as raised:
        builders.choose("kaniko" if where == "option" else None)
    assert "'kaniko'" in str(raised.value) and "auto, classic, buildkit" in str(raised.value)


def fake_docker(folder: Path, script: str) -> Path:
    """A `docker` command that runs script (sh) for any arguments: buildx as this test wants it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "docker"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.parametrize(
    "args, env, says",
    [
        (["--builder", "nope"], {}, "--builder: unknown builder 'nope'"),
        ([], {builders.ENV: "nope"}, "$ROCMFORGE_BUILDER: unknown builder 'nope'"),
        (["--builder", "buildkit"], {}, "--builder: the BuildKit builder needs docker buildx"),
        ([], {builders.ENV: "buildkit"}, "$ROCMFORGE_BUILDER: the BuildKit builder needs docker buildx"),
    ],
)
def test_the_command_refuses_a_bad_builder_before_the_engine(tmp_path, args, env, says):
    """One line, exit 2, and no engine needed (DOCKER_HOST names no socket): a `docker` without
    buildx (it fails `docker buildx version`) is what `--builder buildkit` meets."""
    matrix = copy_project(tmp_path / "p")
    bin_dir = fake_docker(tmp_path / "bin", "exit 1\n").parent
    proc = run_cli(
        "--matrix", str(matrix), "build", "--target", "hip-runtime", *args,
        env={**DEAD_ENGINE, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "engine" not in proc.stderr


LOCAL = SimpleNamespace(context=None)  # an engine reached by DOCKER_HOST or the local socket


def test_buildkit_runs_buildx_and_reads_it_as_the_classic_stream(tmp_path, monkeypatch):
    """The context goes in on stdin, the options as buildx spells them; `#N [i/n] STEP` lines become
    the classic builder's `Step i/n : STEP`, and the image ID is the one the engine shows for the tag
    (buildx's --iidfile holds the config digest, which the containerd store does not know images by)."""
    got = tmp_path / "got"
    script = (
        'if [ "$2" = version ]; then echo "github.com/docker/buildx 0.29.1"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > {got}.args; cat > {got}.context\n'
        'echo "#1 [internal] load build definition from Dockerfile"\n'
        'echo "#5 [builder 1/2] FROM docker.io/library/x"\n'
        'echo "#6 [2/3] RUN make"\n'
    )
    monkeypatch.setenv("PATH", f"{fake_docker(tmp_path / 'bin', script).parent}:{os.environ['PATH']}")
    found = builders.Buildx.find()
    assert found is not None and found.version == "github.com/docker/buildx 0.29.1"
    shown = {"t:1": "sha256:abc"}
    engine = SimpleNamespace(context=None, shown_id=shown.get)
    kit = builders.BuildKitBuilder(engine=engine, buildx=found)  # type: ignore[arg-type]
    chunks = list(kit.build(io.BytesIO(b"TAR"), tag="t:1", labels={"a": "b"}, buildargs={"X": "1"}, nocache=True))
    steps = [c["stream"] for c in chunks if c.get("stream", "").startswith("Step ")]
    assert steps == ["Step 1/2 : FROM docker.io/library/x (builder)\n", "Step 2/3 : RUN make\n"]
    assert chunks[-1] == {"aux": {"ID": "sha256:abc"}}
    args = Path(f"{got}.args").read_text().split("\n")
    assert args[:4] == ["buildx", "build", "--builder", "default"] and args[-2] == "-"
    for pair in (["--tag", "t:1"], ["--label", "a=b"], ["--build-arg", "X=1"], ["--provenance", "false"]):
        assert any(args[i : i + 2] == pair for i in range(len(args))), pair
    assert "--load" in args and "--no-cache" in args
    assert Path(f"{got}.context").read_bytes() == b"TAR"


def test_a_failed_buildx_is_an_error_in_the_stream(tmp_path, monkeypatch):
    script = (
        'if [ "$2" = version ]; then echo github.com/docker/buildx 0.29.1; exit 0; fi\n'
        'echo "#7 [3/3] RUN false"\necho "ERROR: failed"\nexit 1\n'
    )
    monkeypatch.setenv("PATH", f"{fake_docker(tmp_path / 'bin', script).parent}:{os.environ['PATH']}")
    kit = builders.BuildKitBuilder(engine=LOCAL, buildx=builders.Buildx.find())  # type: ignore[arg-type]
    chunks = list(kit.build(io.BytesIO(b""), tag="t", labels={}, buildargs={}, nocache=False))
    assert chunks[-1]["error"] == "ERROR: failed" and not any("aux" in c for c in chunks)


def test_an_engine_reached_through_a_docker_context_builds_on_that_contexts_builder():
    """buildx names the builder of a context after the context (`docker buildx ls`): `default` would
    be the local engine, not the one rocmforge reached."""
    found = builders.Buildx("docker", "buildx 0.29.1")
    remote = SimpleNamespace(context="rf-remote")
    for engine, builder in ((LOCAL, "default"), (remote, "rf-remote")):
        cmd = builders.BuildKitBuilder(engine, found).command(  # type: ignore[arg-type]
            tag="t", labels={}, buildargs={}, nocache=False
        )
        assert cmd[1:5] == ["buildx", "build", "--builder", builder]


# -- what BuildKit commits for a step that changed no file --------------------------------------


def layer(diff_id: str, built: list[bytes] | None, inherited: bool = False) -> LayerResult:
    if built is None:
        return LayerResult(diff_id, 0, diff_id, inherited=inherited)
    res = CanonicalResult(diff_id, 1024, "sha256:raw-" + diff_id[-4:])
    res.built_paths = built
    return res


def image(comment: str | None, built: list[bytes]):
    """A base layer, a RUN that changed a file, then `RUN true` as a builder wrote them."""
    extra = {"comment": comment} if comment else {}
    config = {
        "history": [
            {"created_by": "debootstrap"},
            {"created_by": "ENV A=1", "empty_layer": True, **extra},
            {"created_by": "RUN touch /x", **extra},
            {"created_by": "RUN true", **extra},
        ]
    }
    results = [layer("sha256:base", None, True), layer("sha256:" + "1" * 64, [b"x"]), layer(EMPTY_TAR, built)]
    files = [("sha256:base", None, 0), ("sha256:" + "1" * 64, Path("a"), 1), (EMPTY_TAR, Path("b"), 1024)]
    return config, results, files


def test_buildkit_s_layer_of_a_step_that_changed_nothing_is_dropped():
    config, results, files = image(BUILDKIT_STEP, [b"etc/"])
    out, kept, kept_files = without_empty_layers(config, results, files)
    assert [r.diff_id for r in kept] == ["sha256:base", "sha256:" + "1" * 64]
    assert [f[0] for f in kept_files] == ["sha256:base", "sha256:" + "1" * 64]
    assert out["history"][-1] == {"created_by": "RUN true", "comment": BUILDKIT_STEP, "empty_layer": True}
    assert "empty_layer" not in config["history"][-1]  # the input is left as it was
    assert without_empty_layers(*image(BUILDKIT_STEP, []))[1] == kept  # an empty tar as BuildKit wrote it


@pytest.mark.parametrize(
    "comment, built",
    [
        (None, [b"etc/"]),  # the classic builder's layer: it made one, so the step changed something
        (BUILDKIT_STEP, [b"etc/", b"tmp/"]),  # BuildKit's, holding more than its mount points
        (BUILDKIT_STEP, [b"var/log/"]),
    ],
)
def test_other_empty_layers_stay(comment, built):
    config, results, files = image(comment, built)
    out, kept, _ = without_empty_layers(config, results, files)
    assert out is config and kept is results


def test_a_history_that_does_not_pair_with_the_layers_is_left_alone():
    config, results, files = image(BUILDKIT_STEP, [b"etc/"])
    config["history"].append({"created_by": "RUN more"})
    assert without_empty_layers(config, results, files)[1] is results


def test_the_pin_of_buildx_is_sid_s_package():
    pin = json.loads(
        (Path(__file__).resolve().parents[1] / "fixtures" / "tools" / "docker-buildx-sid.json").read_text()
    )
    (deb,) = pin["packages"]
    assert deb["package"] == "docker-buildx" and len(deb["sha256"]) == 64 and deb["size"] > 1_000_000
    assert pin["binary"] == "usr/libexec/docker/cli-plugins/docker-buildx"
