"""Checks of the GPUs rocminfo lists against the built targets: whether any is listed, integrated
GPUs beside discrete ones, ``HSA_OVERRIDE_GFX_VERSION``, and which targets cover which GPU.

GPUs hidden by the ``HIP_VISIBLE_DEVICES`` recommendation are left out of the override and
coverage checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmforge.doctor.diagnosis import Diagnosis, Gpu, describe_all
from rocmforge.doctor.findings import FAIL, OK, SKIPPED, WARN, Recommendation, Verdict
from rocmforge.doctor.gfx import (
    GFX_OVERRIDES,
    NATIVE,
    OVERRIDE,
    UNCOVERED,
    coverage,
    hsa_override_version,
    runs_natively,
)
from rocmforge.shared import program

SEED_ERROR = "HIP error: invalid device function"
NO_GPU = Verdict(SKIPPED, "no GPU listed")


def gpus(d: Diagnosis) -> Verdict:
    """fail: rocminfo lists no GPU agent (driver not loaded, ``/dev/kfd`` not accessible, ...).
    warn: ``/dev/kfd`` exists (or a saved output was given) but no rocminfo output could be had."""
    source = d.source
    if d.from_file and d.info is not None and d.info.stripped:
        # A paste copied from a thread: say what was not rocminfo's, so nothing is dropped unseen.
        source += f" (read as a paste, stripped: {', '.join(d.info.stripped)})"
    if d.info is None:
        if d.from_file or d.kfd.exists:
            return Verdict(
                WARN,
                f"could not list the GPUs: {source}; the integrated-GPU, override and coverage "
                f"checks need rocminfo output",
            )
        # the kfd check already fails for this
        return Verdict(SKIPPED, f"no /dev/kfd, so no GPU to enumerate (rocminfo: {source})")
    if d.gpus:
        return Verdict(OK, f"{len(d.gpus)} GPU(s) from {source}: {'; '.join(g.describe() for g in d.gpus)}")
    problems = "; ".join(d.info.problems) or "no problem reported"
    hint = ""
    if any("/dev/kfd" in p for p in d.info.problems):
        hint = " (add the user to the group owning /dev/kfd and /dev/dri/renderD*; in a container, --group-add its GID)"
    return Verdict(FAIL, f"{source} lists no GPU agent: {problems}{hint}")


def integrated_gpus(d: Diagnosis) -> Verdict:
    """warn: an integrated GPU next to discrete ones. HIP numbers both, and work that lands on the
    iGPU stops with ``HIP error: invalid device function`` (seed: Radeon Pro W7900 + Ryzen 9 7900X
    iGPU); recommends ``HIP_VISIBLE_DEVICES`` = the discrete GPUs' indices."""
    if not d.gpus:
        return NO_GPU
    if d.discrete_only is None:
        only_igpus = any(g.agent.is_apu for g in d.gpus)
        return Verdict(OK, "only integrated GPU(s): nothing to hide" if only_igpus else "no integrated GPU")
    reason = (
        f"rocminfo lists the integrated GPU {describe_all(d.hidden)} next to {describe_all(d.visible)}; HIP "
        f"numbers them all, and work that lands on the iGPU stops with `{SEED_ERROR}` (seed: Radeon Pro "
        f"W7900 + Ryzen 9 7900X iGPU) until HIP_VISIBLE_DEVICES={d.discrete_only} selects only the discrete "
        f"GPU(s)"
    )
    return Verdict(WARN, reason, Recommendation({"HIP_VISIBLE_DEVICES": d.discrete_only}, reason))


@dataclass(frozen=True)
class OverrideNeed:
    """A GPU that some built target runs on only through HSA_OVERRIDE_GFX_VERSION."""

    gpu: Gpu
    pose: str  # the gfx it must pose as
    needed_by: tuple[str, ...]  # the targets that need the override on it
    native_in: tuple[str, ...]  # the targets that cover it without

    def describe(self) -> str:
        text = (
            f"{self.gpu.describe()} is not among the archs of target(s) {', '.join(self.needed_by)}, whose "
            f"{self.pose} code runs on it (same ISA family) when "
            f"HSA_OVERRIDE_GFX_VERSION={hsa_override_version(self.pose)}"
        )
        if self.native_in:
            text += f"; target(s) {', '.join(self.native_in)} cover it without"
        return text


def override_needs(d: Diagnosis) -> list[OverrideNeed]:
    """The visible GPUs that some built target runs on only through HSA_OVERRIDE_GFX_VERSION, each with the gfx
    it must pose as and the targets that cover it natively; [] when none."""
    needs = []
    for g in d.visible:
        needed_by = tuple(t for t, archs in d.built.items() if coverage(g.gfx, g.agent.isas, archs)[0] == OVERRIDE)
        if needed_by:
            native_in = tuple(t for t, archs in d.built.items() if runs_natively(g.gfx, g.agent.isas, archs))
            needs.append(OverrideNeed(g, GFX_OVERRIDES[g.gfx], needed_by, native_in))
    return needs


OVERRIDE_VAR = "HSA_OVERRIDE_GFX_VERSION"
_WORST = {OK: 0, SKIPPED: 0, WARN: 1, FAIL: 2}


def set_overrides(d: Diagnosis) -> list[tuple[str, str]]:
    """(where, value) for each HSA_OVERRIDE_GFX_VERSION already set: in the host's environment
    (the user's, or root's for a copied host's proc/self/environ) and in built images' Env."""
    found = []
    if d.facts.environ.get(OVERRIDE_VAR):
        found.append(("the host's environment", d.facts.environ[OVERRIDE_VAR]))
    for target in sorted(d.built):
        value = d.facts.image_env.get(target, {}).get(OVERRIDE_VAR)
        if value:
            found.append((f"target {target}'s image (Env)", value))
    return found


def judge_override(value: str, g: Gpu) -> tuple[str, str]:
    """(status, why) for an override value on one GPU: across major versions fails (the runtime
    refuses it; before it did, such overrides ran code of another ISA into page faults and hangs),
    within the family warns (unofficial), the GPU's own version is a no-op."""
    parts = value.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return WARN, f"{OVERRIDE_VAR}={value} is not a major.minor.stepping version: the runtime ignores it"
    major, minor, step = (int(p) for p in parts)
    pose = f"gfx{major}{minor:x}{step:x}"
    own = hsa_override_version(g.gfx)
    if value.strip() == own:
        return OK, f"{OVERRIDE_VAR}={value} is {g.describe()}'s own version: no effect, it can go"
    if major != int(own.split(".")[0]):
        return FAIL, (
            f"{OVERRIDE_VAR}={value} makes {g.describe()}, a {g.gfx} ({own}), pose as {pose}: across major "
            f"versions the ISA differs, the runtime refuses such an override and code built for {pose} "
            f"cannot run; unset it"
        )
    return WARN, (
        f"{OVERRIDE_VAR}={value} makes {g.describe()}, a {g.gfx} ({own}), pose as {pose} (same family: an "
        f"unofficial workaround, not supported by AMD)"
    )


def _with_set_overrides(d: Diagnosis, verdict: Verdict) -> Verdict:
    """The override check's verdict, preceded by what each override already set does to the
    visible GPUs; the worst status wins."""
    found = [(where, judge_override(value, g)) for where, value in set_overrides(d) for g in d.visible]
    if not found:
        return verdict
    status = max([s for _, (s, _) in found] + [verdict.status], key=lambda s: _WORST[s])
    if status == SKIPPED:
        status = OK
    detail = "; ".join(f"{where}: {why}" for where, (_, why) in found)
    return Verdict(status, f"{detail}. {verdict.detail}", verdict.recommendation)


def gfx_override(d: Diagnosis) -> Verdict:
    """fail: an ``HSA_OVERRIDE_GFX_VERSION`` set in the host's environment or a built image's Env
    names another major version than a visible GPU's (:func:`judge_override`). warn: one set
    within the GPU's family; a visible GPU runs a built image only through the override
    (recommended for the targets that need it), or needs an override that would break another
    visible GPU (the variable renames every GPU of the process: then not recommended)."""
    if not d.visible:
        set_here = set_overrides(d)
        if set_here:
            return Verdict(
                SKIPPED,
                "no GPU listed to compare " + ", ".join(f"{OVERRIDE_VAR}={v} ({w})" for w, v in set_here) + " with",
            )
        return NO_GPU
    return _with_set_overrides(d, _needed_override(d))


def _needed_override(d: Diagnosis) -> Verdict:
    if not d.built:
        known = [
            f"{g.gfx} usually runs {GFX_OVERRIDES[g.gfx]} code with HSA_OVERRIDE_GFX_VERSION="
            f"{hsa_override_version(GFX_OVERRIDES[g.gfx])}"
            for g in d.visible
            if g.gfx in GFX_OVERRIDES
        ]
        return Verdict(SKIPPED, "no built target to compare with" + (f" ({'; '.join(known)})" if known else ""))
    needs = override_needs(d)
    if not needs:
        return Verdict(OK, "no visible GPU needs HSA_OVERRIDE_GFX_VERSION")
    poses = {n.pose for n in needs}
    needing = {n.gpu for n in needs}
    # The variable renames every GPU of the process: each other visible GPU must be that gfx (or pose as it).
    harmed = [
        g
        for g in d.visible
        if g not in needing and len(poses) == 1 and g.gfx not in poses and GFX_OVERRIDES.get(g.gfx) not in poses
    ]
    findings = "; ".join(n.describe() for n in needs)
    if len(poses) == 1 and not harmed:
        pose = next(iter(poses))
        value = hsa_override_version(pose)
        reason = (
            findings + f". Set HSA_OVERRIDE_GFX_VERSION={value} in containers of those targets so the "
            f"runtime reports {pose} (an unofficial workaround, not supported by AMD)"
        )
        targets = tuple(sorted({t for n in needs for t in n.needed_by}))
        return Verdict(WARN, reason, Recommendation({"HSA_OVERRIDE_GFX_VERSION": value}, reason, targets))
    why = (
        "different GPUs would need different values"
        if len(poses) > 1
        else f"it would also make {describe_all(harmed)} pose as {next(iter(poses))}"
    )
    return Verdict(
        WARN,
        findings + f". Not recommended: the variable applies to every GPU of the process and "
        f"{why}; select one GPU with HIP_VISIBLE_DEVICES and set the override only for it",
    )


def _hidden_note(d: Diagnosis) -> str:
    if not d.hidden:
        return ""
    return f" (left out: {describe_all(d.hidden)}, hidden by HIP_VISIBLE_DEVICES)"


def pruned_refusal(d: Diagnosis, target: str) -> str | None:
    """One line when the target's image keeps GPU files only for its archs (pruned) and no visible
    GPU runs them, not even through HSA_OVERRIDE_GFX_VERSION: its job would stop with
    hipErrorNoBinaryForGpu, so `run` refuses it before the container starts."""
    if target not in d.facts.pruned_targets or not d.visible:
        return None
    archs = d.built[target]
    if any(coverage(g.gfx, g.agent.isas, archs)[0] != UNCOVERED for g in d.visible):
        return None
    gpus = ", ".join(f"{g.describe()} is {g.gfx}" for g in d.visible)
    return (
        f"target {target}: this host's GPU {gpus}, but the image keeps GPU code only for "
        f"{', '.join(archs)} (pruned): add {d.visible[0].gfx} to the target's archs, or build it with "
        "prune_archs: false"
    )


def target_coverage(d: Diagnosis, target: str) -> Verdict:
    """``coverage:<target>``, warn: that target does not cover every visible GPU natively (only a
    warning: images are often built for other machines). fail: its image is pruned to its archs
    and no visible GPU is among them (:func:`pruned_refusal`)."""
    if not d.visible:
        return NO_GPU
    refusal = pruned_refusal(d, target)
    if refusal:
        return Verdict(FAIL, refusal)
    archs = d.built[target]
    words = {g: coverage(g.gfx, g.agent.isas, archs) for g in d.visible}
    native = [g.describe() for g in d.visible if words[g][0] == NATIVE]
    over = [
        f"{g.describe()} only with HSA_OVERRIDE_GFX_VERSION={hsa_override_version(str(words[g][1]))}"
        for g in d.visible
        if words[g][0] == OVERRIDE
    ]
    none = [g.describe() for g in d.visible if words[g][0] == UNCOVERED]
    parts = []
    if native:
        parts.append(f"covers {', '.join(native)}")
    if over:
        parts.append("; ".join(over))
    if none:
        parts.append(f"no code for {', '.join(none)} (HIP stops with hipErrorNoBinaryForGpu)")
    detail = f"archs {', '.join(archs) or 'none'}: " + "; ".join(parts) + _hidden_note(d)
    return Verdict(OK if not over and not none else WARN, detail)


def _best_coverage(d: Diagnosis, g: Gpu) -> str:
    words = [coverage(g.gfx, g.agent.isas, archs)[0] for archs in d.built.values()]
    return NATIVE if NATIVE in words else OVERRIDE if OVERRIDE in words else UNCOVERED


def overall_coverage(d: Diagnosis) -> Verdict:
    """fail: there are built targets and GPUs, but no visible GPU is covered by any built target,
    not even through an override: every image built here would stop with
    ``hipErrorNoBinaryForGpu``, as useless as running without a GPU. warn: some visible GPU is
    covered by no built target, or only through an override."""
    if not d.built:
        return Verdict(SKIPPED, f"no built target (build one with `{program.command('build --target X')}`)")
    if not d.visible:
        return NO_GPU
    best = {g: _best_coverage(d, g) for g in d.visible}
    uncovered = [g.describe() for g in d.visible if best[g] == UNCOVERED]
    overridden = [g.describe() for g in d.visible if best[g] == OVERRIDE]
    if len(uncovered) == len(d.visible):
        built_archs = sorted({x for archs in d.built.values() for x in archs})
        return Verdict(
            FAIL,
            f"no built target has code for {', '.join(uncovered)}: every image built here would "
            f"stop with hipErrorNoBinaryForGpu on these GPUs (built archs: {', '.join(built_archs)}); "
            f"add the GPU's gfx to a target's archs in matrix.yaml and build it",
        )
    parts = []
    if uncovered:
        parts.append(f"no built target has code for {', '.join(uncovered)}")
    if overridden:
        parts.append(f"{', '.join(overridden)} only with HSA_OVERRIDE_GFX_VERSION")
    if parts:
        return Verdict(WARN, "; ".join(parts))
    return Verdict(OK, "every visible GPU is covered by at least one built target" + _hidden_note(d))
