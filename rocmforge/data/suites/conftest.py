"""Suites that run inside one built image: `python build.py test --target X` (or --image REF).

Run directly with pytest:
`pytest rocmforge/data/suites --matrix matrix.yaml --image rocmforge/hip-runtime:debian13-rocm5.7 --target hip-runtime`.
GPU honesty, both ways:
- on a host without /dev/kfd a check that needs a GPU is skipped with a reason starting
  "not GPU-verified:" (JUnit: skipped, with that message); it never passes there: a test marked
  `gpu` that passes on such a host is turned into a failure;
- on a host with /dev/kfd, or with --require-gpu (the CI GPU job), a GPU check that cannot see the
  GPU fails instead."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from rocmforge.data.suites import judged
from rocmforge.data.suites.judged import PROBES_IN_CONTAINER, probe_container
from rocmforge.define.matrix import load_matrix
from rocmforge.host import engines, registrybase
from rocmforge.host.container import IMAGE_PYTHON, host_gpu_access
from rocmforge.render.plan import load_plan
from rocmforge.resolve.image_packages import expected_packages
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.verify.suites import NOT_GPU_VERIFIED

EXPECTED_IN_CONTAINER = "/tmp/rocmforge-expected"  # what the host knows the image must hold


def pytest_addoption(parser):
    g = parser.getgroup("rocmforge suites")
    g.addoption("--image", help="image reference to verify")
    g.addoption("--target", help="matrix target the image was built from (default: its io.rocmforge.target label)")
    g.addoption("--matrix", default="matrix.yaml")
    g.addoption("--results-json", help="write per-test outcomes here (used by build.py test)")
    g.addoption("--session-id", default=None, help="label value for containers started by this run")
    g.addoption(
        "--require-gpu",
        action="store_true",
        default=False,
        help="a GPU check that cannot see a GPU fails instead of reporting 'not GPU-verified' "
        "(implied when the host has /dev/kfd)",
    )


_GPU_REQUIRED: dict[str, str | None] = {"why": None}


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: a check that needs a GPU (never passes on a host without /dev/kfd)")
    # A suite process is ended with SIGTERM when the command is stopped: taken as Ctrl-C, so that
    # finalizers and with-blocks (the container, the outside check's temporary folder) still run.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if config.getoption("--require-gpu", default=False):
        _GPU_REQUIRED["why"] = "--require-gpu was given"
    elif host_gpu_access().present:
        _GPU_REQUIRED["why"] = "this host has /dev/kfd"


def not_gpu_verified(reason: str):
    """A GPU check that could not see a GPU: a skip on a GPU-less host, a failure where a GPU is
    required (the host has /dev/kfd, or --require-gpu)."""
    if _GPU_REQUIRED["why"]:
        pytest.fail(f"GPU required ({_GPU_REQUIRED['why']}) but the check could not use it: {reason}", pytrace=False)
    pytest.skip(f"{NOT_GPU_VERIFIED}: {reason}")


class InspectedImage:
    """The image under test as the engine inspects it."""

    def __init__(self, attrs: dict):
        self.attrs, self.id = attrs, attrs["Id"]
        self.labels: dict[str, str] = (attrs.get("Config") or {}).get("Labels") or {}


@pytest.fixture(scope="session")
def client():
    try:
        return engines.connect(timeout=600, check=False)
    except BuildError as exc:
        pytest.fail(f"Docker engine not reachable: {exc}")


@pytest.fixture(scope="session")
def image_ref(request):
    ref = request.config.getoption("--image")
    if not ref:
        pytest.fail("--image is required (build.py test passes it)")
    return ref


@pytest.fixture(scope="session")
def image(client, image_ref):
    return InspectedImage(client.inspect(image_ref))


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
def variant(target, target_name, image):
    """The archs of the target's variant the image is (its io.rocmforge.archs label names one of the
    target's variants), or () for the target's main image, which is judged against the matrix's
    archs (an image built before an arch was added then fails for the code it lacks). An image
    labelled with an arch the target does not declare fails: it is no image this target builds."""
    label = image.labels.get("io.rocmforge.archs", "")
    archs = [a for a in label.split(",") if a]
    if target is None or not archs or set(archs) == set(target.archs):
        return ()
    for group in target.variants:
        if set(group) == set(archs):
            return tuple(group)
    if set(archs) <= set(target.archs):
        return ()
    pytest.fail(
        f"the image is labelled io.rocmforge.archs={label}, which is neither target {target_name}'s archs "
        f"({','.join(target.archs)}) nor one of its variants "
        f"({'; '.join(','.join(g) for g in target.variants) or 'none declared'})",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def declared_archs(target, variant, image):
    if target:
        return list(variant or target.archs)
    label = image.labels.get("io.rocmforge.archs", "")
    if not label:
        pytest.fail("the image declares no GPU architectures (no --target, no io.rocmforge.archs label)")
    return label.split(",")


@pytest.fixture(scope="session")
def gpu():
    return host_gpu_access()


@pytest.fixture(scope="session")
def judge(loaded_plan, matrix, target_name, target):
    """The interpreter the probes run on (rocmforge/verify/outside/judge): the image's Python version
    from Debian's signed archive, copied in from the host; else the image's own /usr/bin/python3."""
    return judged.judge_for(loaded_plan, matrix, target_name, target)


@pytest.fixture(scope="session")
def container(request, client, image_ref, image, gpu, judge):
    tc = probe_container(request, client, image_ref, gpu, judge)
    tc.image_python = judged.image_python_path(image.attrs, tc)
    tc.probe_env = tuple((image.attrs.get("Config") or {}).get("Env") or ())
    return tc


@pytest.fixture(scope="session")
def host(container):
    import testinfra

    return testinfra.get_host(f"docker://{container.id}")


@pytest.fixture(scope="session")
def has_python(container):
    return container.exec(["python3", "-c", "print(1)"]).rc == 0


def target_chain(matrix, target_name):
    """The target and every target its image is built on (from_target), nearest first."""
    out, name = [], target_name
    while name:
        out.append(matrix.targets[name])
        name = matrix.targets[name].from_target
    return out


def registry_base_image(client, image: str, digest: str, image_id: str | None = None) -> str | None:
    """The engine's ID of a registry base pinned by digest, or None when the engine does not hold it
    (found as the outside check finds it: host.registrybase.held)."""
    shown = client.shown_id(image_id) if image_id else None
    ref = None if shown or not digest else registrybase.held(client, image, digest)
    return shown or (client.shown_id(ref) if ref else None)


@pytest.fixture(scope="session")
def declared_components(matrix, target_name, target):
    """Component names the image carries (its own and those of the targets it is built on)."""
    if target is None:
        return []
    return list(dict.fromkeys(c for t in target_chain(matrix, target_name) for c in t.components))


@pytest.fixture(scope="session")
def torch_expected(matrix, target_name, target):
    """(version, build) of the torch the matrix says the image carries, or None: no torch declared."""
    if target is None:
        return None
    version, build = matrix.torch_of(target_name)
    return (version, build) if version else None


TORCH_INFO = (
    "import json, torch; print(json.dumps({'version': torch.__version__, "
    "'hip': torch.version.hip, 'gpu': torch.cuda.is_available()}))"
)


@pytest.fixture(scope="session")
def torch_info(container, has_python, torch_expected, target_name):
    """torch's version and HIP version inside the image, or None when the image has no torch and
    the matrix declares none. A declared torch that does not import is a failure naming the error."""
    if not has_python:
        if torch_expected:
            pytest.fail(
                f"target {target_name} declares torch {torch_expected[0]} but the image has no python3", pytrace=False
            )
        return None
    r = container.exec([IMAGE_PYTHON, "-c", TORCH_INFO], timeout=300)
    if r.rc == 0:
        return json.loads(r.stdout.strip().splitlines()[-1])
    if torch_expected:
        err = (r.stderr.strip() or r.stdout.strip()).splitlines()
        pytest.fail(
            f"target {target_name} declares torch {torch_expected[0]} ({torch_expected[1]} build) but "
            f"`import torch` fails: {err[-1] if err else f'exit {r.rc}'}",
            pytrace=False,
        )
    return None


@pytest.fixture(scope="session")
def loaded_plan(request):
    """The plan of --matrix and the matrix.lock it carries, made once for the run; what stops it
    is kept, so each test that needs it fails saying what it wanted the plan for."""
    try:
        return load_plan(Path(request.config.getoption("--matrix")))
    except UserError as exc:
        return exc


def plan_for(loaded_plan, why: str):
    """The plan, or the test fails: `why` (it could not be made), then what stopped it."""
    if isinstance(loaded_plan, UserError):
        pytest.fail(f"{why}: {loaded_plan}", pytrace=False)
    return loaded_plan


@pytest.fixture(scope="session")
def locked_packages(loaded_plan, matrix, target_name, target):
    """The dpkg packages (name -> version) the image must hold, from matrix.lock on the host side
    (rocmforge.resolve.image_packages): a package removed inside the image is still expected. None for an
    image that is not from a matrix target."""
    if target is None:
        return None
    why = "cannot render the matrix and its lock, which the image's packages are checked against"
    lock = plan_for(loaded_plan, why).lock
    return expected_packages(lock, matrix, target_name)


@pytest.fixture(scope="session")
def gpu_inventory(container, matrix, declared_components, torch_expected, has_python, locked_packages):
    """What the image should hold, from what the target installs: the file lists of the ROCm
    packages of the lock's closure (dpkg; without a lock, the ROCm packages installed), its
    components' outputs, and the shared libraries of its declared Python distributions (torch,
    bitsandbytes). {"files": {path: {"source", "exists"}}, "programs": {...},
    "packages_not_installed": [...], ...}"""
    if not has_python:
        pytest.fail("python3 is not in the image: the inventory probe cannot run", pytrace=False)
    args = []
    if locked_packages is not None and locked_packages.packages:
        container.put_files(
            EXPECTED_IN_CONTAINER, {"packages.json": json.dumps(sorted(locked_packages.packages)).encode()}, mode=0o644
        )
        args += ["--packages", f"{EXPECTED_IN_CONTAINER}/packages.json"]
    for cname in declared_components:
        comp = matrix.components[cname]
        if comp.kind == "hip-program":
            args += ["--file", f"/opt/rocmforge/bin/{cname}"]
        if cname.startswith("bitsandbytes"):
            args += ["--dist", "bitsandbytes"]
    if torch_expected:
        args += ["--dist", "torch"]
    r = container.exec(["python3", f"{PROBES_IN_CONTAINER}/linkage.py", "--inventory", *args], timeout=600)
    if r.rc != 0:
        pytest.fail(f"inventory probe failed: {r.output[-2000:]}", pytrace=False)
    inv = json.loads(r.stdout)
    if not inv["files"]:
        pytest.fail(
            "the image's packages and components name no GPU library at all (no ROCm package in the "
            "lock's closure or installed, no GPU component): nothing to verify",
            pytrace=False,
        )
    return inv


@pytest.fixture(scope="session")
def gpu_library_paths(gpu_inventory):
    """The expected GPU files that are present (missing ones are reported by the suites)."""
    return [p for p, f in gpu_inventory["files"].items() if f["exists"]]


def missing_expected(gpu_inventory, key: str = "files") -> list[str]:
    return [f"{p} ({f['source']})" for p, f in gpu_inventory[key].items() if not f["exists"]]


# -- results for build.py test ------------------------------------------------------------------
_RESULTS: list[dict] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if (
        rep.when == "call"
        and rep.passed
        and item.get_closest_marker("gpu") is not None
        and not host_gpu_access().present
    ):
        # Honesty net: whatever a GPU check did, without /dev/kfd it did not check a GPU.
        rep.outcome = "failed"
        rep.longrepr = "a GPU check passed on a host without /dev/kfd: it cannot have verified a GPU"
    if rep.when == "call" or rep.outcome != "passed":
        detail = ""
        if rep.skipped and isinstance(rep.longrepr, tuple):
            detail = rep.longrepr[2].removeprefix("Skipped: ")
        elif rep.failed and call.excinfo is not None:
            detail = str(call.excinfo.value).split("\nassert ")[0].strip()[:2000]
        elif rep.failed:
            detail = str(rep.longrepr)[:2000]
        props = dict(rep.user_properties)
        _RESULTS.append(
            {
                "suite": item.module.__name__.rsplit(".", 1)[-1].removeprefix("test_"),
                "test": item.name,
                "phase": rep.when,
                "outcome": rep.outcome,
                "detail": detail,
                "figures": props.get("figures"),
                "seconds": round(rep.duration, 3),
            }
        )


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--results-json")
    if path:
        Path(path).write_text(json.dumps(_RESULTS, indent=2))


# -- the image as users run it (issue 38) ----------------------------------------------------------
from rocmforge.host.container import run_as_users_do  # noqa: E402 - kept with the fixture that uses it


@pytest.fixture(scope="session")
def run_as_users(client, image_ref, image, container, gpu):
    """run(argv) -> (what, result): argv run as `docker run IMAGE ARGV...` runs it (the image's own
    entrypoint, Env, User and WorkingDir; host.container.run_as_users_do), in a short-lived
    container of this run's session; `what` names the command and the config it ran under, for
    messages. The suite containers are exec'd into past the entrypoint: only this sees what users see."""
    cfg = image.attrs.get("Config") or {}
    where = (
        f"entrypoint {json.dumps(cfg.get('Entrypoint'))}, user {cfg.get('User') or 'root'!r}, "
        f"workdir {cfg.get('WorkingDir') or '/'!r}"
    )

    def run(argv: list[str], timeout: int = 300):
        shown = " ".join(a if a and " " not in a and "\n" not in a else json.dumps(a) for a in argv)
        shown = shown if len(shown) < 120 else shown[:117] + "..."
        return (
            f"`docker run {image_ref} {shown}` ({where})",
            run_as_users_do(client, image_ref, argv, session=container.session, gpu=gpu, timeout=timeout),
        )

    return run
