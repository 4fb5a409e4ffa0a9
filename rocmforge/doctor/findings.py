"""What `build.py doctor` reports: checks with a status and a detail, and the environment it
recommends for containers; as text (the default) or JSON (``--json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)

_LABELS = {OK: "ok", WARN: "WARN", FAIL: "FAIL", SKIPPED: "skip"}


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


@dataclass(frozen=True)
class Verdict:
    """What one check function finds; the table of checks gives it its name."""

    status: str
    detail: str
    recommendation: Recommendation | None = None


@dataclass(frozen=True)
class RunAccess:
    """How `run` hands this host's GPU to a container, as the checks found it: the device nodes
    and their owning GIDs, the CDI names that replace the nodes when a fitting spec is read by the
    engine, and whether a rootless podman must keep the user's groups."""

    devices: tuple[str, ...] = ()
    group_ids: tuple[int, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    keep_groups: bool = False
    shm_size: str | None = None  # --shm-size for this host's GPUs and memory; None: run's default
    # What each engine's own command line takes (run --dry-run prints both): Docker reads a spec
    # only from the folders its daemon lists, podman always from /etc/cdi and /var/run/cdi.
    docker_cdi_devices: tuple[str, ...] = ()
    podman_cdi_devices: tuple[str, ...] = ()
    wsl: bool = False  # WSL2: /dev/dxg (in devices) instead of the KFD nodes


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    # What the checks read (the GPUs, which stay visible): `run` and `pull` pick an image from it.
    diagnosis: Any = field(default=None, compare=False, repr=False)
    access: RunAccess = field(default_factory=RunAccess)

    @property
    def ok(self) -> bool:
        """No check failed (warnings and skipped checks are fine)."""
        return not any(c.status == FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def add(self, name: str, verdict: Verdict) -> None:
        self.checks.append(Check(name, verdict.status, verdict.detail))
        if verdict.recommendation is not None:
            self.recommendations.append(verdict.recommendation)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def failed(self, name: str) -> str | None:
        """The detail of check name when it failed, else None."""
        return next((c.detail for c in self.checks if c.name == name and c.status == FAIL), None)

    def env_for(self, target: str | None = None) -> dict[str, str]:
        """The recommended environment for containers of target (None: recommendations meant for
        every container only), e.g. for `docker run -e`."""
        env: dict[str, str] = {}
        for r in self.recommendations:
            if not r.targets or (target is not None and target in r.targets):
                env.update(r.env)
        return env

    def to_json(self) -> dict:
        return {
            "checks": [c.to_json() for c in self.checks],
            "recommendations": [r.to_json() for r in self.recommendations],
        }

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
        lines.append(
            f"{count[FAIL]} failed, {count[WARN]} warning(s), {count[OK]} ok, {count[SKIPPED]} skipped"
            + ("" if self.ok else " (exit code 1)")
        )
        return "\n".join(lines)
