"""What the doctor knows about a host (:class:`HostFacts`), and :func:`gather`, which reads it.

:func:`gather` is the only part of the doctor with effects: it asks the Docker engine (version,
data root, built images), looks at ``/dev/kfd`` and ``/dev/dri/renderD*`` (present, read/write
for this user, owning GID), the ``amdgpu`` kernel module (``/sys/module/amdgpu`` or
``/proc/modules``), runs rocminfo (the host's when it is on PATH, else one in a built image with
the devices passed, through an injected callable) or reads a saved rocminfo output, and measures
the free space under Docker's data root.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocmforge.assemble.engine import image_id
from rocmforge.doctor import cdi, platform
from rocmforge.doctor.hostroot import HostRoot, Identity, NodeFacts
from rocmforge.doctor.rootless import EngineTraits, saved_traits
from rocmforge.host import engineinfo, engines
from rocmforge.host.container import TrackedContainer, host_gpu_access
from rocmforge.host.enginebase import EngineError
from rocmforge.render.archprune import LABEL
from rocmforge.verify.readers import kfd as kfd_reader
from rocmforge.verify.readers import rocminfo

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import BuildPlan

DEFAULT_DOCKER_ROOT = "/var/lib/docker"
ROCMINFO_TIMEOUT_S = 60

RocminfoRunner = Callable[[], tuple[str, str]]  # () -> (output, where it came from)


@dataclass(frozen=True)
class HostFacts:
    """Everything the checks look at. The defaults describe a bare host: no engine, no device
    nodes, nothing measured."""

    engine_version: str | None = None
    engine_error: str | None = None  # why the engine could not be reached
    engine_description: str | None = None  # engine, version, API and image store (engineinfo)
    engine_problem: str | None = None  # what rocmforge lacks on this engine, when something
    kfd: NodeFacts | None = None  # None: same as absent
    render_nodes: tuple[NodeFacts, ...] = ()
    amdgpu_module: bool | None = None  # None: could not tell
    rocminfo_text: str | None = None
    rocminfo_source: str = ""  # where rocminfo_text came from, or why there is none
    free_disk_bytes: int | None = None
    disk_path: str = DEFAULT_DOCKER_ROOT
    built_targets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The KFD topology's GPUs, read when there is no rocminfo output (or from --kfd-topology DIR).
    kfd_info: rocminfo.RocmInfo | None = None
    kfd_source: str = ""
    pruned_targets: frozenset[str] = frozenset()  # built targets whose images keep only their archs' GPU files
    host_root: str = "/"  # where the host was read: "/" is this one, else a copy (--host-root DIR)
    identity: Identity | None = None  # the user whose groups a rootless engine hands on; None: not known
    environ: dict[str, str] = field(default_factory=dict)  # the user's environment (DOCKER_HOST, CONTAINER_HOST)
    engine_traits: EngineTraits = EngineTraits()  # rootless or not, CDI folders; fields None when not known
    cdi_specs: tuple[cdi.CdiSpec, ...] = ()  # the CDI specs for amd.com/gpu under /etc/cdi and /var/run/cdi
    platform: platform.PlatformFacts = platform.PlatformFacts()  # driver version, kernel, /dev/shm, memory, WSL
    built_rocm: dict[str, str] = field(default_factory=dict)  # built target -> its image's ROCm (io.rocmforge.rocm)
    image_env: dict[str, dict[str, str]] = field(default_factory=dict)  # built target -> its image's Env


@dataclass(frozen=True)
class EngineFacts:
    """What the Docker engine told :func:`gather`."""

    version: str | None = None
    error: str | None = None  # why it could not be reached; None when it was
    data_root: str | None = None  # DockerRootDir
    description: str | None = None
    problem: str | None = None
    built_targets: dict[str, tuple[str, ...]] | None = None  # None: not known
    traits: EngineTraits = EngineTraits()
    images: ImageDetails | None = None


@dataclass(frozen=True)
class ImageDetails:
    """What the built images carry that the driver and override checks compare: each target's
    ROCm (its io.rocmforge.rocm label) and its environment (the image config's Env)."""

    rocm: dict[str, str] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)


def _env_of(attrs: dict | None) -> dict[str, str]:
    items = ((attrs or {}).get("Config") or {}).get("Env") or []
    return dict(str(e).partition("=")[::2] for e in items if "=" in str(e))


def tagged_images(client: Engine, label: str) -> list[dict]:
    """The inspect documents of the engine's tagged images that carry label (name or name=value)."""
    return [
        client.inspect(img["Id"])
        for img in client.list_images(label=label)
        if any(t != "<none>:<none>" for t in img.get("RepoTags") or ())
    ]


def _labels(attrs: dict) -> dict[str, str]:
    return (attrs.get("Config") or {}).get("Labels") or {}


def image_details_from_labels(client: Engine) -> ImageDetails:
    """The newest tagged image per io.rocmforge.target: its ROCm label and its Env."""
    newest: dict[str, tuple[str, dict, dict]] = {}
    for attrs in tagged_images(client, "io.rocmforge.target"):
        labels = _labels(attrs)
        name, created = labels.get("io.rocmforge.target"), str(attrs.get("Created", ""))
        if name and (name not in newest or created > newest[name][0]):
            newest[name] = (created, labels, attrs)
    return ImageDetails(
        rocm={n: v[1]["io.rocmforge.rocm"] for n, v in newest.items() if v[1].get("io.rocmforge.rocm")},
        env={n: _env_of(v[2]) for n, v in newest.items()},
    )


def image_details_from_plan(client: Engine, plan: BuildPlan, built: Iterable[str]) -> ImageDetails:
    """The plan's built targets: ROCm from their labels, Env from their content-tagged images."""
    env = {}
    for name in built:
        try:
            env[name] = _env_of(client.inspect(plan.targets[name].content_tag))
        except EngineError:  # the image went away meanwhile: its Env is not known
            continue
    return ImageDetails(rocm={n: plan.targets[n].labels.get("io.rocmforge.rocm", "") for n in built}, env=env)


def connect_engine() -> Engine:
    """The engine of the environment, whether or not rocmforge can build on it (the report says);
    BuildError when it cannot be reached."""
    return engines.connect(timeout=10, check=False)


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _amdgpu_loaded(sys_root: str, proc_root: str) -> bool | None:
    if os.path.isdir(os.path.join(sys_root, "module", "amdgpu")):
        return True  # loaded module, or built in (it has parameters, so it is listed)
    known = os.path.isdir(os.path.join(sys_root, "module"))
    try:
        with open(os.path.join(proc_root, "modules"), encoding="utf-8", errors="replace") as f:
            if any(line.split(" ", 1)[0] == "amdgpu" for line in f):
                return True
        known = True
    except OSError:
        pass
    return False if known else None


def _free_bytes(path: str) -> int | None:
    """Free space of the filesystem that holds path (or would, when it does not exist yet)."""
    p = os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def built_targets_from_labels(client: Engine) -> dict[str, tuple[str, ...]]:
    """Targets with a tagged image on the engine, by their io.rocmforge.target / .archs labels
    (the newest image per target)."""
    newest: dict[str, tuple[str, tuple[str, ...]]] = {}
    for attrs in tagged_images(client, "io.rocmforge.target"):
        labels = _labels(attrs)
        name = labels.get("io.rocmforge.target")
        archs = tuple(a for a in labels.get("io.rocmforge.archs", "").split(",") if a)
        created = str(attrs.get("Created", ""))
        if name and (name not in newest or created > newest[name][0]):
            newest[name] = (created, archs)
        elif name and created == newest[name][0]:
            # A target's per-arch variants share its creation time: the target covers them all.
            newest[name] = (created, newest[name][1] + tuple(a for a in archs if a not in newest[name][1]))
    return {n: v[1] for n, v in sorted(newest.items())}


def pruned_targets_from_labels(client: Engine) -> frozenset[str]:
    """Targets with a tagged image whose label says its GPU files were pruned to its archs."""
    return frozenset(
        _labels(a)["io.rocmforge.target"]
        for a in tagged_images(client, f"{LABEL}=true")
        if _labels(a).get(LABEL) == "true" and "io.rocmforge.target" in _labels(a)
    )


def built_targets_from_plan(client: Engine, plan: BuildPlan) -> dict[str, tuple[str, ...]]:
    """The plan's targets whose current content tag exists on the engine (built from this matrix)."""
    return {name: tuple(tp.archs) for name, tp in plan.targets.items() if image_id(client, tp.content_tag) is not None}


def image_rocminfo_runner(client: Engine, image: str, *, dev_root: str = "/dev", timeout: int = 120) -> RocminfoRunner:
    """A rocminfo_runner for :func:`gather`: rocminfo in a throw-away container of image, with
    the host's GPU device nodes and their groups passed. Returns (output, source)."""

    def run_it() -> tuple[str, str]:
        with TrackedContainer(client, image, gpu=host_gpu_access(dev_root)) as c:
            r = c.exec(["rocminfo"], timeout=timeout)
        if r.rc == 127:
            raise RuntimeError(f"rocminfo is not installed in {image}")
        return r.output, f"rocminfo in {image}"

    return run_it


def _read_engine(client: Engine | None, built_targets: dict[str, tuple[str, ...]] | None) -> EngineFacts:
    """Never raises: an engine that cannot be reached is a fact. built_targets: given ones are
    kept, None reads the labels of the engine's images."""
    if client is None:
        try:
            client = connect_engine()
        except Exception as exc:  # no socket, bad DOCKER_HOST, docker-py missing
            return EngineFacts(error=_error_text(exc), built_targets=built_targets)
    try:
        version = str(client.version().get("Version") or "unknown version")
    except Exception as exc:  # engine down or unreachable
        return EngineFacts(error=_error_text(exc), built_targets=built_targets)
    data_root: str | None
    description: str | None
    problem: str | None
    try:
        info = client.system_info()
        data_root = info.get("DockerRootDir")
        described = client.described
        description, problem = described.describe(), engineinfo.problem(described)
        traits = EngineTraits.of_info(info, podman=described.podman)
    except Exception:  # info is a nicety
        data_root = description = problem = None
        traits = EngineTraits()
    images = None
    if built_targets is None:
        try:
            built_targets = built_targets_from_labels(client)
            images = image_details_from_labels(client)
        except Exception:  # listing images failed: coverage is then skipped
            built_targets = None
    return EngineFacts(
        version=version,
        data_root=data_root,
        description=description,
        problem=problem,
        built_targets=built_targets,
        traits=traits,
        images=images,
    )


def _host_rocminfo(exe: str) -> tuple[str | None, str]:
    try:
        p = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=ROCMINFO_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"host rocminfo ({exe}) failed: {exc}"
    return p.stdout.decode("utf-8", errors="replace"), f"host rocminfo ({exe})"


def _read_rocminfo(
    *, kfd_exists: bool, rocminfo_file: str | None, host_rocminfo: bool, rocminfo_runner: RocminfoRunner | None
) -> tuple[str | None, str]:
    """(rocminfo output or None, where it came from or why there is none), first found of: the
    saved file, the host's rocminfo, the runner (only with /dev/kfd: without it there is no GPU
    to list)."""
    if rocminfo_file is not None:
        return rocminfo.read_saved(rocminfo_file), rocminfo_file
    exe = shutil.which("rocminfo") if host_rocminfo else None
    if exe:
        return _host_rocminfo(exe)
    if not kfd_exists:
        return None, "not run: no /dev/kfd"
    if rocminfo_runner is None:
        return None, "not run: rocminfo is not on PATH and no built image was given to run it in"
    try:
        return rocminfo_runner()
    except Exception as exc:  # the image, the engine or the container failed
        return None, f"rocminfo in a built image failed: {exc}"


def _copied_traits(host: HostRoot) -> EngineTraits:
    """A copied host's engine is the one its saved info describes, never the engine this machine
    talks to; without the file, not known."""
    return saved_traits(host) or EngineTraits(source="no docker-info.json in the copied host")


def gather(
    *,
    client: Engine | None = None,
    dev_root: str = "/dev",
    sys_root: str = "/sys",
    proc_root: str = "/proc",
    host_root: str | None = None,
    docker_root: str | None = None,
    built_targets: dict[str, tuple[str, ...]] | None = None,
    rocminfo_runner: RocminfoRunner | None = None,
    rocminfo_file: str | None = None,
    host_rocminfo: bool = True,
    kfd_topology: str | None = None,
    pruned_targets: frozenset[str] = frozenset(),
    images: ImageDetails | None = None,
) -> HostFacts:
    """Read this host. Never raises for what it finds (an unreachable engine, missing nodes, a
    failing rocminfo are facts); only a ``rocminfo_file`` that cannot be read or is not a whole
    rocminfo output raises UserError.

    client: the engine; None connects to the one of the environment (DOCKER_HOST).
    host_root: a copy of a host laid out under a folder (:mod:`.hostroot`): its device nodes,
        /sys, /proc, user, environment and CDI specs are read there instead of dev_root,
        sys_root and proc_root, and neither this host's rocminfo nor the runner is run (they
        would list this machine's GPUs); its saved engine info (DIR/docker-info.json) describes
        its engine for the rootless and CDI checks, never the engine this machine talks to.
    docker_root: where images are stored; None asks the engine (DockerRootDir), else /var/lib/docker.
    built_targets: name -> archs; None reads the io.rocmforge.* labels of the engine's images.
    rocminfo_file: a saved rocminfo output to use instead of running rocminfo.
    host_rocminfo: run the host's rocminfo when it is on PATH (first choice).
    kfd_topology: a saved KFD topology folder to read instead of this host's (sys_root's).
    pruned_targets: built targets whose images keep GPU files only for their archs.
    images: the built images' ROCm and Env; None takes what the engine's labelled images say.
    rocminfo_runner: called when the host has no rocminfo but has /dev/kfd; returns
        (output, source), e.g. :func:`image_rocminfo_runner`.
    """
    engine = _read_engine(client, built_targets)
    host = HostRoot(host_root or "/")
    who = host.identity()
    # A copy without proc/self/status is read as root (who opens every node), but whose groups a
    # rootless engine hands on is then not known.
    known_who = who if host.live or host.read("/proc/self/status") is not None else None
    if host_root is not None:
        sys_root, proc_root = host.path("/sys"), host.path("/proc")
        kfd = host.node("/dev/kfd", who)
        renders = tuple(host.node(p, who) for p in host.glob("/dev/dri/renderD*"))
    else:
        kfd = host.node(os.path.join(dev_root, "kfd"), who)
        renders = tuple(host.node(p, who) for p in sorted(glob.glob(os.path.join(dev_root, "dri", "renderD*"))))
    kfd_info: rocminfo.RocmInfo | None
    if kfd_topology is not None:  # the saved topology is what the user asked to diagnose
        text, source = None, "not run: --kfd-topology given"
        kfd_info, kfd_source = kfd_reader.read_saved_topology(kfd_topology), kfd_topology
    elif host_root is not None and rocminfo_file is None:
        text, source = None, "not run: a copied host (--host-root) has no rocminfo to run; its KFD topology is read"
        kfd_source = host.path("/sys/class/kfd/kfd/topology")
        kfd_info = kfd_reader.read_topology(kfd_source)
    else:
        text, source = _read_rocminfo(
            kfd_exists=kfd.exists,
            rocminfo_file=rocminfo_file,
            host_rocminfo=host_rocminfo,
            rocminfo_runner=rocminfo_runner,
        )
        kfd_source = os.path.join(sys_root, "class", "kfd", "kfd", "topology")
        kfd_info = kfd_reader.read_topology(kfd_source)
    disk_path = docker_root or engine.data_root or DEFAULT_DOCKER_ROOT
    images = images or engine.images or ImageDetails()
    return HostFacts(
        engine_version=engine.version,
        engine_error=engine.error,
        engine_description=engine.description,
        engine_problem=engine.problem,
        kfd=kfd,
        render_nodes=renders,
        amdgpu_module=_amdgpu_loaded(sys_root, proc_root),
        rocminfo_text=text,
        rocminfo_source=source,
        free_disk_bytes=_free_bytes(disk_path),
        disk_path=disk_path,
        built_targets=dict(engine.built_targets or {}),
        kfd_info=kfd_info,
        kfd_source=kfd_source,
        pruned_targets=frozenset(pruned_targets),
        host_root=host.root,
        identity=known_who,
        environ=host.environ(),
        engine_traits=engine.traits if host.live else _copied_traits(host),
        cdi_specs=cdi.read_specs(host),
        platform=platform.read(host),
        built_rocm=dict(images.rocm),
        image_env={k: dict(v) for k, v in images.env.items()},
    )
