"""Suites that run inside one built image: `python build.py test --target X` (or --image REF).

Run directly with pytest: `pytest tests/suites --image rocmforge/hip-runtime:debian13-rocm5.7 --target hip-runtime`.
A check that needs a GPU skips with a reason starting "not GPU-verified:" on a host without
/dev/kfd; it never passes there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmforge.container import TrackedContainer, host_gpu_access
from rocmforge.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
PROBES_IN_CONTAINER = "/tmp/rocmforge-probes"
NOT_GPU_VERIFIED = "not GPU-verified"


def pytest_addoption(parser):
    g = parser.getgroup("rocmforge suites")
    g.addoption("--image", help="image reference to verify")
    g.addoption("--target", help="matrix target the image was built from (default: its io.rocmforge.target label)")
    g.addoption("--matrix", default=str(ROOT / "matrix.yaml"))
    g.addoption("--results-json", help="write per-test outcomes here (used by build.py test)")
    g.addoption("--session-id", default=None, help="label value for containers started by this run")


def not_gpu_verified(reason: str):
    pytest.skip(f"{NOT_GPU_VERIFIED}: {reason}")


@pytest.fixture(scope="session")
def client():
    import docker

    try:
        c = docker.from_env(timeout=600)
        c.ping()
    except Exception as exc:
        pytest.fail(f"Docker engine not reachable: {exc}")
    return c


@pytest.fixture(scope="session")
def image_ref(request):
    ref = request.config.getoption("--image")
    if not ref:
        pytest.fail("--image is required (build.py test passes it)")
    return ref


@pytest.fixture(scope="session")
def image(client, image_ref):
    return client.images.get(image_ref)


@pytest.fixture(scope="session")
def matrix(request):
    return load_matrix(request.config.getoption("--matrix"))


@pytest.fixture(scope="session")
def target_name(request, image):
    return request.config.getoption("--target") or image.labels.get("io.rocmforge.target")


@pytest.fixture(scope="session")
def target(matrix, target_name):
    return matrix.targets.get(target_name) if target_name else None


@pytest.fixture(scope="session")
def stack(matrix, target):
    return matrix.stacks[target.stack] if target else None


@pytest.fixture(scope="session")
def declared_archs(target, image):
    if target:
        return list(target.archs)
    label = image.labels.get("io.rocmforge.archs", "")
    if not label:
        pytest.fail("the image declares no GPU architectures (no --target, no io.rocmforge.archs label)")
    return label.split(",")


@pytest.fixture(scope="session")
def gpu():
    return host_gpu_access()


@pytest.fixture(scope="session")
def container(request, client, image_ref, gpu):
    tc = TrackedContainer(client, image_ref, gpu=gpu)
    if request.config.getoption("--session-id"):
        tc.session = request.config.getoption("--session-id")
    tc.start()
    request.addfinalizer(tc.remove)
    files = {p.name: p.read_bytes() for p in (ROOT / "probes").iterdir() if p.is_file()}
    tc.put_files(PROBES_IN_CONTAINER, files)
    return tc


@pytest.fixture(scope="session")
def host(container):
    import testinfra

    return testinfra.get_host(f"docker://{container.id}")


@pytest.fixture(scope="session")
def has_python(container):
    return container.exec(["python3", "-c", "print(1)"]).rc == 0


@pytest.fixture(scope="session")
def torch_info(container, has_python):
    """torch's version and HIP version inside the image, or None when the image has no torch."""
    if not has_python:
        return None
    r = container.exec(["python3", "-c", "import json, torch; print(json.dumps({'version': torch.__version__, "
                        "'hip': torch.version.hip, 'gpu': torch.cuda.is_available()}))"], timeout=120)
    return json.loads(r.stdout.strip().splitlines()[-1]) if r.rc == 0 else None


@pytest.fixture(scope="session")
def gpu_library_paths(stack, torch_info):
    paths = list(stack.gpu_libraries) if stack else []
    paths += ["/opt/rocm*/lib", "/opt/rocmforge/bin"]
    for site in ("/opt/rocmforge/venv/lib/python3*/site-packages", "/opt/conda/envs/*/lib/python3*/site-packages",
                 "/usr/lib/python3/dist-packages", "/usr/local/lib/python3*/dist-packages"):
        paths += [f"{site}/torch/lib", f"{site}/bitsandbytes"]
    return paths


# -- results for build.py test ------------------------------------------------------------------
_RESULTS: list[dict] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" or rep.outcome != "passed":
        detail = ""
        if rep.skipped and isinstance(rep.longrepr, tuple):
            detail = rep.longrepr[2].removeprefix("Skipped: ")
        elif rep.failed and call.excinfo is not None:
            detail = str(call.excinfo.value).split("\nassert ")[0].strip()[:2000]
        props = dict(rep.user_properties)
        _RESULTS.append({"suite": item.module.__name__.rsplit(".", 1)[-1].removeprefix("test_"),
                         "test": item.name, "phase": rep.when, "outcome": rep.outcome,
                         "detail": detail, "figures": props.get("figures")})


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--results-json")
    if path:
        Path(path).write_text(json.dumps(_RESULTS, indent=2))
