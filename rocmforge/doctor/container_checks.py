"""Checks of how containers reach the GPU on this host: through a CDI spec (``amd.com/gpu=N``),
and under a rootless engine whose containers can only have the groups the user has. Both are
skipped for a saved rocminfo output (:func:`~.host_checks.host_only`), since they are about this
host's device nodes."""

from __future__ import annotations

from rocmforge.doctor import cdi, rootless
from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.findings import FAIL, OK, SKIPPED, WARN, Verdict
from rocmforge.doctor.host_checks import host_only
from rocmforge.doctor.hostroot import Identity, NodeFacts

REGENERATE = "regenerate it with `sudo amd-ctk cdi generate` (AMD container toolkit)"


def cdi_names(d: Diagnosis) -> tuple[str, ...]:
    """What `run` passes as ``--device`` instead of the raw nodes: the fitting AMD spec's GPUs,
    when the engine reads it; () otherwise."""
    f = d.facts
    return cdi.run_devices(
        f.cdi_specs, tuple(n.path for n in d.render_nodes), f.engine_traits.cdi_dirs, bool(f.engine_traits.podman)
    )


def engine_mode(d: Diagnosis) -> rootless.EngineMode:
    """The engine the containers run under (Docker or Podman) and whether it is rootless, for this user."""
    who = d.facts.identity
    return rootless.mode(d.facts.environ, who.uid if who else None, d.facts.engine_traits)


@host_only
def cdi_spec(d: Diagnosis) -> Verdict:
    """fail: a CDI spec for ``amd.com/gpu`` names device nodes the host lacks, or a GPU device
    without ``/dev/kfd``, or cannot be read, or two specs define the kind: every runtime that
    resolves ``--device amd.com/gpu=...`` then fails to create the container. warn: the spec fits
    but the engine does not read it (Docker's CDI feature off), or misses a render node the host
    has. skipped: no such spec (`run` passes the nodes themselves)."""
    specs = d.facts.cdi_specs
    if not specs:
        return Verdict(
            SKIPPED,
            f"no CDI spec of kind {cdi.KIND} in {' or '.join(cdi.SPEC_DIRS)}: `run` passes the device nodes themselves",
        )
    renders = tuple(n.path for n in d.render_nodes)
    readable = [s for s in specs if s.kind == cdi.KIND]
    if len(readable) > 1:
        return Verdict(
            FAIL,
            f"{len(readable)} specs define {cdi.KIND} ({', '.join(s.path for s in readable)}): "
            f"runtimes refuse devices defined twice; keep one",
        )
    fatal = [p for s in specs for p in s.problems()]
    if fatal:
        return Verdict(
            FAIL,
            "; ".join(fatal) + f": `docker run --device {cdi.KIND}=...` fails on this host; "
            f"{REGENERATE}. `run` passes the device nodes instead",
        )
    spec = readable[0]
    listed = "; ".join(f"{cdi.KIND}={g.name}: {', '.join(g.nodes)}" for g in spec.gpus)
    unnamed = spec.unnamed(renders)
    if unnamed:
        return Verdict(
            WARN,
            f"{spec.path}: {listed}; no device names {', '.join(unnamed)} (a GPU added after the "
            f"spec was written, which its devices do not give a container); {REGENERATE}. `run` "
            f"passes the device nodes",
        )
    traits = d.facts.engine_traits
    if not cdi.engine_reads(spec, traits.cdi_dirs, bool(traits.podman)):
        said = (
            "the engine's info does not say"
            if traits.cdi_dirs is None
            else f"the engine reads CDI specs from {', '.join(traits.cdi_dirs) or 'nowhere'}"
        )
        return Verdict(
            WARN,
            f"{spec.path} fits this host ({listed}), but {said}: turn on Docker's CDI support "
            f'(daemon.json "features": {{"cdi": true}}); until then `run` passes the device '
            f"nodes",
        )
    names = " ".join(f"--device {n}" for n in cdi_names(d))
    return Verdict(
        OK, f"{spec.path} (cdiVersion {spec.version or '?'}) names this host's nodes: {listed}; `run` passes {names}"
    )


def _owner(n: NodeFacts) -> str:
    return f"{n.path} (group {n.group}, GID {n.gid})" if n.group else f"{n.path} (GID {n.gid})"


def _user(who: Identity) -> str:
    groups = ", ".join(str(g) for g in who.groups) or "none"
    return f"user {who.name or who.uid} (UID {who.uid}, groups {groups})"


@host_only
def rootless_access(d: Diagnosis) -> Verdict:
    """Under a rootless engine (:mod:`.rootless`), fail: the user is not in a group that owns a
    GPU node (and the node is not open to all), so no container of theirs can open it. warn:
    rootless Docker, the user is in the groups but the nodes are not open to all: the default
    runtime (runc) drops the user's groups, only crun's ``run.oci.keep_original_groups=1``
    keeps them. ok: a rootful engine (the daemon opens the nodes; ``--group-add`` GIDs), or
    rootless podman with the groups (``--group-add keep-groups``). skipped: no GPU nodes, or no
    sign either way (the engine's info is not known)."""
    f = d.facts
    nodes = [n for n in ([d.kfd] if d.kfd.exists else []) + list(d.render_nodes) if n.gid is not None]
    if not nodes:
        return Verdict(SKIPPED, "no GPU device nodes, so no groups to compare")
    who, m = f.identity, engine_mode(d)
    if m.rootless is None:
        return Verdict(SKIPPED, f"cannot tell whether the engine runs rootless: {m.why}")
    if not m.rootless:
        gids = sorted({n.gid for n in nodes if n.gid is not None} - {0})
        adds = " ".join(f"--group-add {g}" for g in gids) or "no --group-add"
        return Verdict(
            OK, f"{m.describe()}: the daemon opens the nodes as root, containers get their groups with {adds}"
        )
    if who is None:
        return Verdict(WARN, f"{m.describe()}, but the user's groups could not be read (/proc/self/status)")
    lacking = [n for n in nodes if not n.open_to_all and not who.member_of(n.gid)]
    if lacking:
        fix = ",".join(sorted({n.group or str(n.gid) for n in lacking}))
        pending = sorted({n.group or str(n.gid) for n in lacking if n.gid in who.listed})
        how = (
            f"/etc/group already lists {who.name} in {', '.join(pending)}, but this session began before: log in "
            f"again (or `newgrp {pending[0]}`)"
            if pending
            else f"`sudo usermod -aG {fix} {who.name or who.uid}`, then log in again"
        )
        return Verdict(
            FAIL,
            f"{m.describe()}: containers can have at most the groups of the {_user(who)}, which "
            f"lacks {', '.join(_owner(n) for n in lacking)}: HIP cannot open the GPU in any "
            f"container; {how}",
        )
    closed = [n for n in nodes if not n.open_to_all]
    if m.engine == rootless.PODMAN:
        return Verdict(
            OK,
            f"{m.describe()}: the {_user(who)} is in the groups that own the nodes; podman keeps "
            f"these groups only with --group-add keep-groups (the host GIDs are not mapped in its "
            f"user namespace), which `run` passes for podman",
        )
    if not closed:
        return Verdict(OK, f"{m.describe()}: the GPU nodes are read/write for every user, no group is needed")
    return Verdict(
        WARN,
        f"{m.describe()}: the {_user(who)} is in the groups of "
        f"{', '.join(_owner(n) for n in closed)}, but rootless Docker's default runtime (runc) "
        f"drops them and --group-add GIDs are not mapped in its user namespace; run with crun and "
        f"--annotation run.oci.keep_original_groups=1, or make the nodes read/write for all (udev "
        f'MODE="0666")',
    )
