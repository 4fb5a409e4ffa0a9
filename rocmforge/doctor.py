"""`build.py doctor`: can this host build rocmforge images and run them on its AMD GPUs?

Two halves, so the rules can be tested without a GPU:

* :func:`gather` reads the host (the only function here with effects): the Docker engine and its
  version, ``/dev/kfd`` and ``/dev/dri/renderD*`` (present, read/write for this user, owning GID),
  the ``amdgpu`` kernel module (``/sys/module/amdgpu`` or ``/proc/modules``), the GPUs (the host's
  ``rocminfo`` when it is on PATH, else ``rocminfo`` run in a built image with the devices passed,
  through an injected callable, or a saved ``rocminfo`` output given with ``--rocminfo FILE``),
  the free space under Docker's data root, and the built targets (name -> archs).
* :func:`diagnose` turns those facts into a :class:`Report`: checks (``ok`` / ``warn`` / ``fail`` /
  ``skipped``) and recommended environment variables. It is pure.

Statuses. ``fail`` means containers built here will not get a usable GPU on this host (or nothing
can be built or run at all); ``warn`` means they can, but something needs the user's attention
or a setting; ``skipped`` means the check does not apply (``--rocminfo FILE`` diagnoses someone
else's GPUs, so this host's device nodes and kernel module are not examined) or lacks its input.
The exit code is 0 when no check is ``fail``.

fail
  * ``engine``: the Docker engine is unreachable (nothing can be built, tested or run).
  * ``kfd``: no ``/dev/kfd`` -- "no AMD GPU device nodes: containers will run without a GPU".
    (``render-nodes`` and ``gpus`` are then ``skipped``: they would only repeat it.)
  * ``render-nodes``: ``/dev/kfd`` exists but no ``/dev/dri/renderD*`` (HIP cannot open the GPU).
  * ``amdgpu-module``: the module is not loaded and ``/dev/kfd`` is absent (kept apart from
    ``kfd`` because it names the fix: install or load the driver).
  * ``gpus``: rocminfo lists no GPU agent (driver not loaded, ``/dev/kfd`` not accessible, ...);
    with ``--rocminfo FILE`` this is the "no GPU" failure.
  * ``coverage``: there are built targets and GPUs, but no visible GPU is covered by any built
    target, not even through ``HSA_OVERRIDE_GFX_VERSION``: every image built here would stop with
    ``hipErrorNoBinaryForGpu`` on this host, which is as useless as running without a GPU. (One
    target not covering the host is only a ``warn`` on its own ``coverage:<target>`` check:
    images are often built for other machines.)

warn
  * ``kfd`` / ``render-nodes``: present but not read/write for this user. Host tools such as
    rocminfo fail ("Unable to open /dev/kfd read-write"); containers still get the nodes through
    ``--device`` plus ``--group-add <GID>`` (the daemon opens them), so this is not a failure.
  * ``render-nodes``: render nodes but no ``/dev/kfd`` (another vendor's GPU, or no KFD).
  * ``amdgpu-module``: not loaded although ``/dev/kfd`` exists, or it could not be told.
  * ``gpus``: ``/dev/kfd`` exists but no rocminfo output could be obtained.
  * ``integrated-gpus``: an integrated GPU next to discrete ones. HIP numbers both, and work that
    lands on the iGPU stops with ``HIP error: invalid device function`` (seed: Radeon Pro W7900 +
    Ryzen 9 7900X iGPU) -- recommendation ``HIP_VISIBLE_DEVICES`` = the discrete GPUs' indices.
  * ``gfx-override``: a visible GPU runs a built image only through ``HSA_OVERRIDE_GFX_VERSION``
    (recommended, see below), or needs an override that would break another visible GPU.
  * ``coverage:<target>``: that target does not cover every visible GPU natively.
  * ``coverage``: some visible GPU is covered by no built target, or only through an override.
  * ``disk``: less than :data:`LOW_DISK_BYTES` (60 GB) free under Docker's data root (ROCm images
    are 3-50 GB each, and a build needs its builder images too), or it could not be measured.

``HSA_OVERRIDE_GFX_VERSION`` (:data:`GFX_OVERRIDES`). Consumer RDNA 2 / RDNA 3 parts that ROCm
ships no code for run the code of the family's reference part when the runtime is told to report
that part's gfx version: gfx1031/1032/1033/1034/1035/1036 run gfx1030 code with ``10.3.0``,
gfx1101/1102/1103 run gfx1100 code with ``11.0.0`` (an unofficial workaround that AMD's
maintainers point users to, e.g. ROCm/Tensile#1907 for gfx1036, ROCm/rocBLAS#1536 for gfx1103;
community reports for gfx1031/gfx1032 in ROCm/legacy-rocm-build#1756, #2720). It is recommended only when a
built target's archs lack the GPU's own gfx (and any generic target that covers it, e.g.
``gfx10-3-generic``) but include the override target. The variable applies to every GPU of the
process (ROCm/legacy-rocm-build#5069), so it is not recommended when another visible GPU would be
misidentified by it; hide one of them with ``HIP_VISIBLE_DEVICES`` instead. GPUs hidden by the
``HIP_VISIBLE_DEVICES`` recommendation are left out of the override and coverage checks.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Callable

from .inspect import rocminfo as _ri

__all__ = [
    "FAIL", "GENERIC_TARGETS", "GFX_OVERRIDES", "LOW_DISK_BYTES", "OK", "SKIPPED", "WARN",
    "Check", "HostFacts", "NodeFacts", "Recommendation", "Report",
    "built_targets_from_labels", "built_targets_from_plan", "diagnose", "gather",
    "hsa_override_version", "image_rocminfo_runner", "run",
]

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)

LOW_DISK_BYTES = 60 * 10**9  # ROCm images are 3-50 GB each; a build also keeps its builder image
SEED_ERROR = "HIP error: invalid device function"
DEFAULT_DOCKER_ROOT = "/var/lib/docker"
ROCMINFO_TIMEOUT_S = 60

# GPU -> the gfx whose code objects it runs when HSA_OVERRIDE_GFX_VERSION names that gfx (same ISA
# family; unofficial, not supported by AMD). Sources in the module docstring.
GFX_OVERRIDES: dict[str, str] = {
    "gfx1031": "gfx1030",  # Navi 22: RX 6700 XT / 6750 XT, RX 6800M / 6700M
    "gfx1032": "gfx1030",  # Navi 23: RX 6600 / 6600 XT / 6650 XT, Radeon PRO W6600
    "gfx1033": "gfx1030",  # Van Gogh APU (Steam Deck)
    "gfx1034": "gfx1030",  # Navi 24: RX 6500 XT / 6400
    "gfx1035": "gfx1030",  # Rembrandt APU: Radeon 660M / 680M
    "gfx1036": "gfx1030",  # Raphael / Granite Ridge iGPU (Ryzen 7000 / 9000 desktop)
    "gfx1101": "gfx1100",  # Navi 32: RX 7800 XT / 7700 XT, Radeon PRO W7700
    "gfx1102": "gfx1100",  # Navi 33: RX 7600, Radeon PRO W7600 / W7500
    "gfx1103": "gfx1100",  # Phoenix / Hawk Point APU: Radeon 780M / 760M / 740M
}

# Generic code-object targets and the processors they run on (LLVM AMDGPUUsage, "AMDGPU Generic
# Processors"). An image built for the generic target covers these GPUs without an override.
GENERIC_TARGETS: dict[str, frozenset[str]] = {
    "gfx9-generic": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}),
    "gfx9-4-generic": frozenset({"gfx940", "gfx941", "gfx942", "gfx950"}),
    "gfx10-1-generic": frozenset({"gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
    "gfx10-3-generic": frozenset({"gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035",
                                  "gfx1036"}),
    "gfx11-generic": frozenset({"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
                                "gfx1152", "gfx1153"}),
    "gfx12-generic": frozenset({"gfx1200", "gfx1201"}),
}


def hsa_override_version(gfx: str) -> str:
    """The HSA_OVERRIDE_GFX_VERSION value (major.minor.stepping) that names a gfx processor:
    gfx1030 -> 10.3.0, gfx1100 -> 11.0.0, gfx90a -> 9.0.10 (the last two digits are hex)."""
    digits = gfx.lower().removeprefix("gfx")
    if len(digits) < 3 or not digits[:-2].isdigit():
        raise ValueError(f"{gfx!r} is not a gfx processor name")
    return f"{int(digits[:-2])}.{int(digits[-2], 16)}.{int(digits[-1], 16)}"


# --------------------------------------------------------------------------- facts

@dataclass(frozen=True)
class NodeFacts:
    """One device node as this user sees it."""
    path: str
    exists: bool
    readable_writable: bool = False  # os.access(R_OK | W_OK)
    gid: int | None = None  # the owning group, what `--group-add` needs
    group: str | None = None  # that group's name on this host, when it has one

    def to_json(self) -> dict:
        return {"path": self.path, "exists": self.exists, "readable_writable": self.readable_writable,
                "gid": self.gid, "group": self.group}


@dataclass(frozen=True)
class HostFacts:
    """Everything :func:`diagnose` looks at. The defaults describe a bare host: no engine, no
    device nodes, nothing measured."""
    engine_version: str | None = None
    engine_error: str | None = None  # why the engine could not be reached
    kfd: NodeFacts | None = None  # None: same as absent
    render_nodes: tuple[NodeFacts, ...] = ()
    amdgpu_module: bool | None = None  # None: could not tell
    rocminfo_text: str | None = None
    rocminfo_source: str = ""  # where rocminfo_text came from, or why there is none
    free_disk_bytes: int | None = None
    disk_path: str = DEFAULT_DOCKER_ROOT
    built_targets: dict[str, tuple[str, ...]] = field(default_factory=dict)


# --------------------------------------------------------------------------- report

@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail | skipped
    detail: str

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class Recommendation:
    env: dict[str, str]
    reason: str
    targets: tuple[str, ...] = ()  # the built targets it is for; () = every container on this host

    def to_json(self) -> dict:
        return {"env": dict(self.env), "reason": self.reason}


_LABELS = {OK: "ok", WARN: "WARN", FAIL: "FAIL", SKIPPED: "skip"}


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (warnings and skipped checks are fine)."""
        return not any(c.status == FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def env_for(self, target: str | None = None) -> dict[str, str]:
        """The recommended environment for containers of target (None: recommendations meant for
        every container only), e.g. for `docker run -e`."""
        env: dict[str, str] = {}
        for r in self.recommendations:
            if not r.targets or (target is not None and target in r.targets):
                env.update(r.env)
        return env

    def to_json(self) -> dict:
        return {"checks": [c.to_json() for c in self.checks],
                "recommendations": [r.to_json() for r in self.recommendations]}

    def format_text(self) -> str:
        width = max((len(c.name) for c in self.checks), default=0)
        lines = []
        for c in self.checks:
            head = f"{_LABELS.get(c.status, c.status):<4}  {c.name:<{width}}  "
            detail = c.detail.splitlines() or [""]
            lines.append(head + detail[0])
            lines += [" " * len(head) + d for d in detail[1:]]
        if self.recommendations:
            lines.append("")
            lines.append("recommended environment (docker run -e VAR=value):")
            for r in self.recommendations:
                lines.append("  " + " ".join(f"{k}={v}" for k, v in r.env.items()))
                lines.append("      " + r.reason)
        count = {s: sum(c.status == s for c in self.checks) for s in STATUSES}
        lines.append("")
        lines.append(f"{count[FAIL]} failed, {count[WARN]} warning(s), {count[OK]} ok, {count[SKIPPED]} skipped"
                     + ("" if self.ok else " (exit code 1)"))
        return "\n".join(lines)


# --------------------------------------------------------------------------- diagnose (pure)

def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def _describe(hip_index: int, a: _ri.Agent) -> str:
    kind = "integrated" if a.is_apu else "discrete"
    name = f" '{a.marketing_name}'" if a.marketing_name and a.marketing_name != a.name else ""
    return f"{a.name}{name} (HIP device {hip_index}, {kind})"


def _native(gfx: str, agent_isas: tuple[str, ...], archs) -> bool:
    """Does an image with these archs carry code that this GPU runs without an override?"""
    archs = {a.lower() for a in archs}
    if gfx in archs:
        return True
    generics = {g for g, members in GENERIC_TARGETS.items() if gfx in members}
    generics |= {_ri.gfx_base(i) for i in agent_isas if "generic" in i}
    return bool(generics & archs)


def _override_for(gfx: str, archs) -> str | None:
    """The gfx this GPU would pose as under HSA_OVERRIDE_GFX_VERSION, if the archs cover it."""
    target = GFX_OVERRIDES.get(gfx)
    if target and _native(target, (), archs):
        return target
    return None


def _node_checks(facts: HostFacts) -> list[Check]:
    checks = []
    kfd = facts.kfd if facts.kfd is not None else NodeFacts(path="/dev/kfd", exists=False)
    renders = [n for n in facts.render_nodes if n.exists]

    def owner(n: NodeFacts) -> str:
        if n.gid is None:
            return ""
        return f"group {n.group} (GID {n.gid})" if n.group else f"GID {n.gid}"

    if not kfd.exists:
        checks.append(Check("kfd", FAIL, f"no AMD GPU device nodes: containers will run without a GPU "
                                         f"({kfd.path} is missing: no AMD GPU, or the amdgpu driver is not loaded)"))
    elif kfd.readable_writable:
        checks.append(Check("kfd", OK, f"{kfd.path} present, read/write, owned by {owner(kfd) or 'an unknown group'}"))
    else:
        checks.append(Check("kfd", WARN, f"{kfd.path} present but not read/write for this user: host tools "
                                         f"(rocminfo) fail with 'Unable to open /dev/kfd read-write'; add the user "
                                         f"to {owner(kfd) or 'its group'}. Containers still get it through --device "
                                         f"and --group-add"))

    if not renders:
        if kfd.exists:
            checks.append(Check("render-nodes", FAIL, "/dev/kfd exists but there is no /dev/dri/renderD* node: "
                                                      "HIP cannot open the GPU, containers will run without one"))
        else:  # the kfd check already fails for this; repeating it would only add noise
            checks.append(Check("render-nodes", SKIPPED, "no /dev/dri/renderD* node either (see kfd)"))
    else:
        names = ", ".join(f"{n.path} ({owner(n) or 'unknown group'})" for n in renders)
        denied = [n.path for n in renders if not n.readable_writable]
        if not kfd.exists:
            checks.append(Check("render-nodes", WARN, f"{names}, but no /dev/kfd: these belong to another "
                                                      f"vendor's GPU, or the amdgpu KFD is missing"))
        elif denied:
            checks.append(Check("render-nodes", WARN, f"{names}; not read/write for this user: {', '.join(denied)} "
                                                      f"(host tools fail; containers get them through --group-add)"))
        else:
            checks.append(Check("render-nodes", OK, f"{names}, read/write"))

    nodes = ([kfd] if kfd.exists else []) + renders
    if not nodes:
        checks.append(Check("device-groups", SKIPPED, "no GPU device nodes, so no groups to add"))
    else:
        gids = sorted({n.gid for n in nodes if n.gid} - {0})
        devices = " ".join(f"--device {n.path}" for n in nodes)
        if gids:
            named = {n.gid: n.group for n in nodes if n.gid and n.group}
            who = ", ".join(f"{g} ({named[g]})" if g in named else str(g) for g in gids)
            flags = " ".join(f"--group-add {g}" for g in gids)
            checks.append(Check("device-groups", OK, f"owning GIDs {who}: docker run {devices} {flags} "
                                                     f"(numeric, since the image's group names differ)"))
        else:
            checks.append(Check("device-groups", OK, f"the nodes belong to the root group: docker run {devices} "
                                                     f"needs no --group-add"))

    if facts.amdgpu_module is True:
        checks.append(Check("amdgpu-module", OK, "amdgpu kernel module loaded"))
    elif facts.amdgpu_module is False:
        if kfd.exists:
            checks.append(Check("amdgpu-module", WARN, "amdgpu is not listed in /sys/module or /proc/modules, "
                                                       "yet /dev/kfd exists (a /dev bind-mounted from elsewhere?)"))
        else:
            checks.append(Check("amdgpu-module", FAIL, "amdgpu kernel module not loaded: install the AMD GPU "
                                                       "driver (amdgpu-dkms) or `modprobe amdgpu`"))
    else:
        checks.append(Check("amdgpu-module", WARN, "could not tell whether the amdgpu module is loaded "
                                                   "(neither /sys/module nor /proc/modules is readable)"))
    return checks


def _gfx(a: _ri.Agent) -> str:
    return _ri.gfx_base(a.name)


def _coverage_word(gfx: str, isas, archs) -> tuple[str, str | None]:
    if _native(gfx, isas, archs):
        return "native", None
    target = _override_for(gfx, archs)
    if target:
        return "override", target
    return "none", None


def diagnose(facts: HostFacts, *, from_file: bool = False) -> Report:
    """The checks and recommendations for these facts. ``from_file``: ``facts.rocminfo_text`` is
    a saved output (``--rocminfo FILE``), so this host's device nodes and module are not examined."""
    report = Report()
    checks, recs = report.checks, report.recommendations
    built = {name: tuple(a.lower() for a in archs) for name, archs in (facts.built_targets or {}).items()}

    # -- engine
    if facts.engine_version:
        checks.append(Check("engine", OK, f"Docker Engine {facts.engine_version} reachable"))
    else:
        why = f" ({facts.engine_error})" if facts.engine_error else ""
        checks.append(Check("engine", FAIL, f"Docker engine not reachable{why}: nothing can be built or run; "
                                            f"start dockerd or set DOCKER_HOST"))

    # -- device nodes, kernel module
    kfd_exists = bool(facts.kfd and facts.kfd.exists)
    if from_file:
        why = f"not applicable: diagnosing the saved rocminfo output {facts.rocminfo_source}, not this host's GPUs"
        for name in ("kfd", "render-nodes", "device-groups", "amdgpu-module"):
            checks.append(Check(name, SKIPPED, why))
    else:
        checks += _node_checks(facts)

    # -- GPUs
    info = _ri.parse(facts.rocminfo_text) if facts.rocminfo_text is not None else None
    source = facts.rocminfo_source or "rocminfo"
    gpus: list[tuple[int, _ri.Agent]] = []
    if info is None:
        if from_file or kfd_exists:
            checks.append(Check("gpus", WARN, f"could not list the GPUs: {source}; the integrated-GPU, "
                                              f"override and coverage checks need rocminfo output"))
        else:  # the kfd check already fails for this
            checks.append(Check("gpus", SKIPPED, f"no /dev/kfd, so no GPU to enumerate (rocminfo: {source})"))
    else:
        gpus = list(enumerate(a for a in info.agents if a.device_type == "GPU"))
        if not gpus:
            problems = "; ".join(info.problems) or "no problem reported"
            hint = ""
            if any("/dev/kfd" in p for p in info.problems):
                hint = " (add the user to the group owning /dev/kfd and /dev/dri/renderD*; in a container, --group-add its GID)"
            checks.append(Check("gpus", FAIL, f"{source} lists no GPU agent: {problems}{hint}"))
        else:
            listing = "; ".join(_describe(i, a) for i, a in gpus)
            checks.append(Check("gpus", OK, f"{len(gpus)} GPU(s) from {source}: {listing}"))

    # -- integrated + discrete
    visible = gpus
    if not gpus:
        checks.append(Check("integrated-gpus", SKIPPED, "no GPU listed"))
    else:
        vis = _ri.discrete_only_visible_devices(info)
        igpus = [(i, a) for i, a in gpus if a.is_apu]
        if vis is not None:
            dgpus = [(i, a) for i, a in gpus if not a.is_apu]
            visible = dgpus
            i_desc = ", ".join(_describe(i, a) for i, a in igpus)
            d_desc = ", ".join(_describe(i, a) for i, a in dgpus)
            reason = (f"rocminfo lists the integrated GPU {i_desc} next to {d_desc}; HIP numbers "
                      f"them all, and work that lands on the iGPU stops with `{SEED_ERROR}` (seed: Radeon Pro "
                      f"W7900 + Ryzen 9 7900X iGPU) until HIP_VISIBLE_DEVICES={vis} selects only the discrete GPU(s)")
            checks.append(Check("integrated-gpus", WARN, reason))
            recs.append(Recommendation({"HIP_VISIBLE_DEVICES": vis}, reason))
        elif igpus:
            checks.append(Check("integrated-gpus", OK, "only integrated GPU(s): nothing to hide"))
        else:
            checks.append(Check("integrated-gpus", OK, "no integrated GPU"))
    hidden = [(i, a) for i, a in gpus if (i, a) not in visible]

    # -- HSA_OVERRIDE_GFX_VERSION
    if not visible:
        checks.append(Check("gfx-override", SKIPPED, "no GPU listed"))
    elif not built:
        known = [f"{_gfx(a)} usually runs {GFX_OVERRIDES[_gfx(a)]} code with HSA_OVERRIDE_GFX_VERSION="
                 f"{hsa_override_version(GFX_OVERRIDES[_gfx(a)])}" for _, a in visible if _gfx(a) in GFX_OVERRIDES]
        checks.append(Check("gfx-override", SKIPPED, "no built target to compare with"
                            + (f" ({'; '.join(known)})" if known else "")))
    else:
        # GPU -> (pose-as gfx, targets that need it, targets that cover it natively)
        needs: dict[int, tuple[_ri.Agent, str, list[str], list[str]]] = {}
        for i, a in visible:
            over_in = [t for t, archs in built.items() if _coverage_word(_gfx(a), a.isas, archs)[0] == "override"]
            native_in = [t for t, archs in built.items() if _native(_gfx(a), a.isas, archs)]
            if over_in:
                needs[i] = (a, GFX_OVERRIDES[_gfx(a)], over_in, native_in)
        if not needs:
            checks.append(Check("gfx-override", OK, "no visible GPU needs HSA_OVERRIDE_GFX_VERSION"))
        else:
            poses = {pose for _, pose, _, _ in needs.values()}
            # The variable renames every GPU of the process: each other visible GPU must be that gfx.
            harmed = [(i, a) for i, a in visible if i not in needs and len(poses) == 1
                      and _gfx(a) not in poses and GFX_OVERRIDES.get(_gfx(a)) not in poses]
            parts = []
            for i, (a, pose, over_in, native_in) in needs.items():
                p = (f"{_describe(i, a)} is not among the archs of target(s) {', '.join(over_in)}, whose {pose} code runs "
                     f"on it (same ISA family) when HSA_OVERRIDE_GFX_VERSION={hsa_override_version(pose)}")
                if native_in:
                    p += f"; target(s) {', '.join(native_in)} cover it without"
                parts.append(p)
            if len(poses) == 1 and not harmed:
                pose = next(iter(poses))
                value = hsa_override_version(pose)
                reason = ("; ".join(parts) + f". Set HSA_OVERRIDE_GFX_VERSION={value} in containers of those "
                          f"targets so the runtime reports {pose} (an unofficial workaround, not supported by AMD)")
                checks.append(Check("gfx-override", WARN, reason))
                for_targets = sorted({t for _, _, over_in, _ in needs.values() for t in over_in})
                recs.append(Recommendation({"HSA_OVERRIDE_GFX_VERSION": value}, reason, tuple(for_targets)))
            else:
                why = ("different GPUs would need different values" if len(poses) > 1 else
                       f"it would also make {', '.join(_describe(i, a) for i, a in harmed)} pose as "
                       f"{next(iter(poses))}")
                checks.append(Check("gfx-override", WARN, "; ".join(parts) + f". Not recommended: the variable "
                                    f"applies to every GPU of the process and {why}; select one GPU with "
                                    f"HIP_VISIBLE_DEVICES and set the override only for it"))

    # -- coverage per built target, then overall
    hidden_note = ""
    if hidden:
        hidden_note = f" (left out: {', '.join(_describe(i, a) for i, a in hidden)}, hidden by HIP_VISIBLE_DEVICES)"
    for tname, archs in sorted(built.items()):
        name = f"coverage:{tname}"
        if not visible:
            checks.append(Check(name, SKIPPED, "no GPU listed"))
            continue
        words = {i: _coverage_word(_gfx(a), a.isas, archs) for i, a in visible}
        native = [_describe(i, a) for i, a in visible if words[i][0] == "native"]
        over = [f"{_describe(i, a)} only with HSA_OVERRIDE_GFX_VERSION={hsa_override_version(words[i][1])}"
                for i, a in visible if words[i][0] == "override"]
        none = [_describe(i, a) for i, a in visible if words[i][0] == "none"]
        parts = []
        if native:
            parts.append(f"covers {', '.join(native)}")
        if over:
            parts.append("; ".join(over))
        if none:
            parts.append(f"no code for {', '.join(none)} (HIP stops with hipErrorNoBinaryForGpu)")
        detail = f"archs {', '.join(archs) or 'none'}: " + "; ".join(parts) + hidden_note
        checks.append(Check(name, OK if not over and not none else WARN, detail))

    if not built:
        checks.append(Check("coverage", SKIPPED, "no built target (build one with `python build.py build --target X`)"))
    elif not visible:
        checks.append(Check("coverage", SKIPPED, "no GPU listed"))
    else:
        best = {}
        for i, a in visible:
            words = [_coverage_word(_gfx(a), a.isas, archs)[0] for archs in built.values()]
            best[i] = "native" if "native" in words else "override" if "override" in words else "none"
        uncovered = [_describe(i, a) for i, a in visible if best[i] == "none"]
        overridden = [_describe(i, a) for i, a in visible if best[i] == "override"]
        if all(b == "none" for b in best.values()):
            allarchs = sorted({x for archs in built.values() for x in archs})
            checks.append(Check("coverage", FAIL, f"no built target has code for {', '.join(uncovered)}: every "
                                                  f"image built here would stop with hipErrorNoBinaryForGpu on these "
                                                  f"GPUs (built archs: {', '.join(allarchs)}); add the GPU's gfx to a "
                                                  f"target's archs in matrix.yaml and build it"))
        elif uncovered or overridden:
            parts = []
            if uncovered:
                parts.append(f"no built target has code for {', '.join(uncovered)}")
            if overridden:
                parts.append(f"{', '.join(overridden)} only with HSA_OVERRIDE_GFX_VERSION")
            checks.append(Check("coverage", WARN, "; ".join(parts)))
        else:
            checks.append(Check("coverage", OK, "every visible GPU is covered by at least one built target"
                                                + hidden_note))

    # -- disk
    if facts.free_disk_bytes is None:
        checks.append(Check("disk", WARN, f"could not measure the free space under {facts.disk_path}"))
    elif facts.free_disk_bytes < LOW_DISK_BYTES:
        checks.append(Check("disk", WARN, f"only {_gb(facts.free_disk_bytes)} free under {facts.disk_path} (Docker's "
                                          f"data root): ROCm images are 3-50 GB each; keep at least "
                                          f"{_gb(LOW_DISK_BYTES)} free"))
    else:
        checks.append(Check("disk", OK, f"{_gb(facts.free_disk_bytes)} free under {facts.disk_path}"))
    return report


# --------------------------------------------------------------------------- gather (effects)

def _node(path: str) -> NodeFacts:
    try:
        st = os.stat(path)
    except OSError:
        return NodeFacts(path=path, exists=False)
    group = None
    try:
        import grp

        group = grp.getgrgid(st.st_gid).gr_name
    except (ImportError, KeyError):
        pass
    return NodeFacts(path=path, exists=True, readable_writable=os.access(path, os.R_OK | os.W_OK),
                     gid=st.st_gid, group=group)


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


def built_targets_from_labels(client) -> dict[str, tuple[str, ...]]:
    """Targets with a tagged image on the engine, by their io.rocmforge.target / .archs labels
    (the newest image per target)."""
    newest: dict[str, tuple[str, tuple[str, ...]]] = {}
    for img in client.images.list(filters={"label": "io.rocmforge.target"}):
        if not img.tags:
            continue
        labels = img.labels or {}
        name = labels.get("io.rocmforge.target")
        archs = tuple(a for a in labels.get("io.rocmforge.archs", "").split(",") if a)
        created = str((img.attrs or {}).get("Created", ""))
        if name and (name not in newest or created > newest[name][0]):
            newest[name] = (created, archs)
    return {n: v[1] for n, v in sorted(newest.items())}


def built_targets_from_plan(client, plan) -> dict[str, tuple[str, ...]]:
    """The plan's targets whose current content tag exists on the engine (built from this matrix)."""
    from .engine import image_id

    return {name: tuple(tp.archs) for name, tp in plan.targets.items()
            if image_id(client, tp.content_tag) is not None}


def image_rocminfo_runner(client, image: str, *, dev_root: str = "/dev",
                          timeout: int = 120) -> Callable[[], tuple[str, str]]:
    """A rocminfo_runner for :func:`gather`: rocminfo in a throw-away container of image, with
    the host's GPU device nodes and their groups passed. Returns (output, source)."""
    def run_it() -> tuple[str, str]:
        from .container import TrackedContainer, host_gpu_access

        with TrackedContainer(client, image, gpu=host_gpu_access(dev_root)) as c:
            r = c.exec(["rocminfo"], timeout=timeout)
        if r.rc == 127:
            raise RuntimeError(f"rocminfo is not installed in {image}")
        return r.output, f"rocminfo in {image}"
    return run_it


def gather(*, client=None, dev_root: str = "/dev", sys_root: str = "/sys", proc_root: str = "/proc",
           docker_root: str | None = None, built_targets: dict[str, tuple[str, ...]] | None = None,
           rocminfo_runner: Callable[[], tuple[str, str]] | None = None,
           rocminfo_file: str | None = None, host_rocminfo: bool = True) -> HostFacts:
    """Read this host. Never raises for what it finds (an unreachable engine, missing nodes, a
    failing rocminfo are facts); only a ``rocminfo_file`` that cannot be read or is not a whole
    rocminfo output raises UserError.

    client: a docker client; None connects with docker.from_env.
    docker_root: where images are stored; None asks the engine (DockerRootDir), else /var/lib/docker.
    built_targets: name -> archs; None reads the io.rocmforge.* labels of the engine's images.
    rocminfo_file: a saved rocminfo output to use instead of running rocminfo.
    host_rocminfo: run the host's rocminfo when it is on PATH (first choice).
    rocminfo_runner: called when the host has no rocminfo but has /dev/kfd; returns
        (output, source), e.g. :func:`image_rocminfo_runner`.
    """
    engine_version = engine_error = None
    info_root = None
    if client is None:
        try:
            import docker

            client = docker.from_env(timeout=10)
        except Exception as exc:  # no socket, bad DOCKER_HOST, docker-py missing
            engine_error = str(exc) or type(exc).__name__
            client = None
    if client is not None:
        try:
            engine_version = str(client.version().get("Version") or "unknown version")
        except Exception as exc:  # engine down or unreachable
            engine_error = str(exc) or type(exc).__name__
        if engine_version:
            try:
                info_root = client.info().get("DockerRootDir")
            except Exception:  # info is a nicety
                info_root = None
            if built_targets is None:
                try:
                    built_targets = built_targets_from_labels(client)
                except Exception:  # listing images failed: coverage is then skipped
                    built_targets = None

    kfd = _node(os.path.join(dev_root, "kfd"))
    renders = tuple(_node(p) for p in sorted(glob.glob(os.path.join(dev_root, "dri", "renderD*"))))
    module = _amdgpu_loaded(sys_root, proc_root)

    text, source = None, ""
    if rocminfo_file is not None:
        text, source = _ri.read_saved(rocminfo_file), rocminfo_file
    else:
        exe = shutil.which("rocminfo") if host_rocminfo else None
        if exe:
            try:
                p = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   timeout=ROCMINFO_TIMEOUT_S)
                text, source = p.stdout.decode("utf-8", errors="replace"), f"host rocminfo ({exe})"
            except (OSError, subprocess.TimeoutExpired) as exc:
                source = f"host rocminfo ({exe}) failed: {exc}"
        elif not kfd.exists:
            source = "not run: no /dev/kfd"
        elif rocminfo_runner is not None:
            try:
                text, source = rocminfo_runner()
            except Exception as exc:  # the image, the engine or the container failed
                source = f"rocminfo in a built image failed: {exc}"
        else:
            source = "not run: rocminfo is not on PATH and no built image was given to run it in"

    disk_path = docker_root or info_root or DEFAULT_DOCKER_ROOT
    return HostFacts(engine_version=engine_version, engine_error=None if engine_version else engine_error,
                     kfd=kfd, render_nodes=renders, amdgpu_module=module, rocminfo_text=text,
                     rocminfo_source=source, free_disk_bytes=_free_bytes(disk_path), disk_path=disk_path,
                     built_targets=dict(built_targets or {}))


def run(*, plan=None, rocminfo_file: str | None = None, client=None) -> Report:
    """`build.py doctor`: gather, then diagnose. With a plan, the built targets are the plan's
    targets whose content tag exists, and rocminfo (when the host has none) runs in the first of
    them; without one, the engine's io.rocmforge.* labelled images are used."""
    if rocminfo_file is not None:
        _ri.read_saved(rocminfo_file)   # a file that is no rocminfo output is refused before the engine is asked
    if client is None:
        try:
            import docker

            client = docker.from_env(timeout=10)
            client.ping()
        except Exception:  # gather reports it
            client = None
    built = None
    runner = None
    if client is not None and plan is not None:
        try:
            built = built_targets_from_plan(client, plan)
        except Exception:  # engine trouble: fall back to labels inside gather
            built = None
        for name in plan.order():
            if built and name in built:
                runner = image_rocminfo_runner(client, plan.targets[name].content_tag)
                break
    facts = gather(client=client, built_targets=built, rocminfo_runner=runner, rocminfo_file=rocminfo_file)
    return diagnose(facts, from_file=rocminfo_file is not None)
