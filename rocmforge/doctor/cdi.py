"""CDI specs for AMD GPUs on a host, as AMD's container toolkit writes them (``amd-ctk cdi
generate``): a JSON (or YAML) file under ``/etc/cdi`` or ``/var/run/cdi``, the two folders CDI
runtimes read by default, with ``kind: amd.com/gpu`` and one device per GPU, named by its index
(``amd.com/gpu=0``), plus ``all``. amd-ctk lists each GPU's DRM nodes (``/dev/dri/cardN`` and
``/dev/dri/renderDN``) and ``/dev/kfd`` in that device's ``containerEdits.deviceNodes``.

This module only reads: which specs there are, which device nodes each device names, and which of
those the host lacks. The doctor's ``cdi`` check (:mod:`.container_checks`) judges them, and
:func:`run_devices` says what `run` passes.

A spec goes stale when GPUs are added, removed or renumbered after it was written; then a runtime
fails to create the container ("unresolvable CDI devices" or a missing device node), which is why
every node a spec names is looked up on the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml

from rocmforge.doctor.hostroot import HostRoot

KIND = "amd.com/gpu"
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
KFD = "/dev/kfd"


@dataclass(frozen=True)
class CdiDevice:
    name: str  # "0", "1", ..., "all"
    nodes: tuple[str, ...]  # host paths of its device nodes
    missing: tuple[str, ...] = ()  # those the host does not have

    @property
    def numbered(self) -> bool:
        return self.name.isdigit()


@dataclass(frozen=True)
class CdiSpec:
    path: str  # the host path of the spec file
    kind: str = ""
    version: str = ""
    devices: tuple[CdiDevice, ...] = ()
    error: str | None = None  # why it could not be read as a CDI spec

    @property
    def folder(self) -> str:
        return self.path.rsplit("/", 1)[0]

    @property
    def gpus(self) -> tuple[CdiDevice, ...]:
        """The per-GPU devices, in index order (what `run` names as amd.com/gpu=N)."""
        return tuple(sorted((d for d in self.devices if d.numbered), key=lambda d: int(d.name)))

    def problems(self) -> list[str]:
        """What makes this spec fail on this host (a runtime refuses its devices); [] when none."""
        if self.error:
            return [f"{self.path} cannot be read as a CDI spec: {self.error}"]
        found = []
        if not self.gpus:
            found.append(f"{self.path} names no per-GPU device ({KIND}=0, =1, ...)")
        for d in self.devices:
            if d.missing:
                found.append(f"{KIND}={d.name} names {', '.join(d.missing)}, which this host does not have")
            if d.numbered and KFD not in d.nodes:
                found.append(f"{KIND}={d.name} does not name {KFD}: a container gets no compute queue without it")
        return found

    def unnamed(self, render_nodes: tuple[str, ...]) -> list[str]:
        """The host's render nodes no GPU device names: GPUs added after the spec was written,
        which containers given the spec's devices do not get."""
        named = {n for d in self.gpus for n in d.nodes}
        return [r for r in render_nodes if r not in named]


def _host_path(node: dict) -> str | None:
    if not isinstance(node, dict):
        return None
    p = node.get("hostPath") or node.get("path")
    return p if isinstance(p, str) and p else None


def parse(text: str, path: str, host: HostRoot) -> CdiSpec:
    """One spec file's text (JSON is YAML too, but JSON is tried first for its clearer errors)."""
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        return CdiSpec(path, error=str(exc).splitlines()[0])
    if not isinstance(data, dict):
        return CdiSpec(path, error="not a mapping")
    kind, devices = str(data.get("kind") or ""), data.get("devices")
    if not isinstance(devices, list):
        return CdiSpec(path, kind=kind, error="no list of devices")
    found = []
    for dev in devices:
        if not isinstance(dev, dict) or not isinstance(dev.get("name"), (str, int)):
            return CdiSpec(path, kind=kind, error="a device without a name")
        edits = dev.get("containerEdits") or {}
        raw = edits.get("deviceNodes") if isinstance(edits, dict) else None
        nodes = tuple(p for p in (_host_path(n) for n in raw or ()) if p)
        found.append(CdiDevice(str(dev["name"]), nodes, tuple(n for n in nodes if not host.exists(n))))
    return CdiSpec(path, kind=kind, version=str(data.get("cdiVersion") or ""), devices=tuple(found))


def read_specs(host: HostRoot) -> tuple[CdiSpec, ...]:
    """The host's specs for AMD GPUs, and the files in the CDI folders that look like AMD's
    (named amd*) but cannot be read; other vendors' specs are left out."""
    specs = []
    for folder in SPEC_DIRS:
        for path in host.glob(folder + "/*"):
            if not path.endswith((".json", ".yaml", ".yml")):
                continue
            text = host.read(path)
            spec = parse(text, path, host) if text is not None else CdiSpec(path, error="cannot be read")
            if spec.kind == KIND or (spec.error and path.rsplit("/", 1)[1].lower().startswith("amd")):
                specs.append(spec)
    return tuple(specs)


def usable(specs: tuple[CdiSpec, ...], render_nodes: tuple[str, ...]) -> CdiSpec | None:
    """The one AMD spec to use, when there is exactly one and it fits the host: two specs of the
    same kind make the runtime refuse devices both define."""
    readable = [s for s in specs if s.kind == KIND]
    if len(readable) != 1 or readable[0].problems() or readable[0].unnamed(render_nodes):
        return None
    return readable[0]


def engine_reads(spec: CdiSpec, cdi_dirs: tuple[str, ...] | None, podman: bool) -> bool:
    """Does the engine resolve this spec's devices? Podman always reads the default folders;
    Docker only with its CDI feature on, which `docker info` shows as CDISpecDirs (missing or
    empty: off, or an engine too old to say)."""
    if podman:
        return True
    if not cdi_dirs:
        return False
    folders = {d.rstrip("/") for d in cdi_dirs}
    folders |= {"/var" + d for d in folders if d.startswith("/run/")}  # /var/run is /run on every current distro
    return spec.folder in folders


def run_devices(
    specs: tuple[CdiSpec, ...], render_nodes: tuple[str, ...], cdi_dirs: tuple[str, ...] | None, podman: bool
) -> tuple[str, ...]:
    """The CDI names `run` passes instead of raw device nodes (amd.com/gpu=0, =1, ...), or ()
    when there is no spec that fits this host and the engine reads."""
    spec = usable(specs, render_nodes)
    if spec is None or not engine_reads(spec, cdi_dirs, podman):
        return ()
    return tuple(f"{KIND}={d.name}" for d in spec.gpus)
