"""The canonical image config: only what describes the image, every time set to the epoch, and
nothing that names the build host, its containers or the site it fetched from. The image ID is
the sha256 of these bytes."""

from __future__ import annotations

import functools
import re

from rocmforge.host import aptmirror
from rocmforge.resolve.bases import canonical_json
from rocmforge.shared.files import iso_utc

# What is kept. Everything else (container, container_config, docker_version, Hostname, Image,
# Domainname, Attach*, ...) names the build host or the build's containers.
TOP_KEYS = ("architecture", "os", "os.version", "os.features", "variant", "author", "config")
CONFIG_KEYS = (
    "User",
    "ExposedPorts",
    "Env",
    "Cmd",
    "Healthcheck",
    "ArgsEscaped",
    "Volumes",
    "WorkingDir",
    "Entrypoint",
    "OnBuild",
    "Labels",
    "StopSignal",
    "StopTimeout",
    "Shell",
)
HISTORY_KEYS = ("created_by", "author", "comment", "empty_layer")
# Labels an engine adds by itself (buildah's version stamp): they name the builder, not the image.
ENGINE_LABELS = ("io.buildah.version",)
EMPTY: tuple[object, ...] = (None, "", [], {})  # an empty Entrypoint, OnBuild or Volumes means what an absent one does


def normalise_config(
    cfg: dict, diff_ids: list[str], *, epoch: int, steps: list[str] | None = None, merged: int = 0
) -> bytes:
    """The canonical config bytes for an image whose (normalised) layers are diff_ids. steps: the
    instructions the image's own (last) history entries record, as the Dockerfile words them
    (render.dockerfile.stage_steps), which replace the builder's own wording. merged: how many of steps'
    trailing LABEL steps the builder's last entry holds besides its own (they were sent as one
    LABEL line: render.dockerfile.trailing_labels); that entry is spelled as the steps it stands for."""
    created = iso_utc(epoch)
    out = {k: cfg[k] for k in TOP_KEYS if cfg.get(k) is not None}
    if isinstance(cfg.get("config"), dict):
        out["config"] = {k: v for k, v in cfg["config"].items() if k in CONFIG_KEYS and v not in EMPTY}
        labels = {k: v for k, v in (out["config"].get("Labels") or {}).items() if k not in ENGINE_LABELS}
        out["config"].pop("Labels", None)
        if labels:
            out["config"]["Labels"] = labels
    out["created"] = created
    out["history"] = [
        {**{k: h[k] for k in HISTORY_KEYS if h.get(k) not in (None, "")}, "created": created}
        for h in cfg.get("history") or []
    ]
    if steps and merged and out["history"] and out["history"][-1].get("empty_layer"):
        out["history"][-1:] = [dict(out["history"][-1]) for _ in range(merged + 1)]
    if steps and len(steps) <= len(out["history"]):
        for h, step in zip(out["history"][len(out["history"]) - len(steps) :], steps):
            h["created_by"] = step
            h.pop("comment", None)  # buildah's "FROM <base>" note
    _name_copy_sources_by_content(out["history"], diff_ids)
    for h in out["history"]:
        if "created_by" in h:
            h["created_by"] = drop_site_args(h["created_by"])
    if not out["history"]:
        del out["history"]
    out["rootfs"] = {"type": "layers", "diff_ids": list(diff_ids)}
    return canonical_json(out)


# The classic builder names a COPY/ADD source by a checksum of the copied files that includes
# their mtimes (`COPY dir:<hex> in /opt/...`), so a venv or binary made at another time changes the
# history although the normalised layer is identical. The layer's diff ID names the same content.
_SOURCE_SUM_RE = re.compile(r"\b(dir|file|multi):[0-9a-f]{64}\b")


def _name_copy_sources_by_content(history: list[dict], diff_ids: list[str]) -> None:
    steps = [h for h in history if not h.get("empty_layer")]
    if len(steps) != len(diff_ids):
        return  # history and layers do not pair up (an unusual base): leave it as it is
    for h, diff_id in zip(steps, diff_ids):
        if "created_by" in h:
            digest = diff_id.split(":")[-1]
            h["created_by"] = _SOURCE_SUM_RE.sub(functools.partial(_by_content, digest), h["created_by"])


def _by_content(digest: str, m: re.Match[str]) -> str:
    return f"{m.group(1)}:{digest}"


# The classic builder prefixes a RUN's history with the build arguments in scope ("|2 A=1 B=2 cmd").
# Site settings (the apt mirror) change where bytes come from, not what the image is.
SITE_ARGS = (aptmirror.ARG,)


def drop_site_args(created_by: str) -> str:
    """A history line without the site's build arguments (SITE_ARGS)."""
    m = re.match(r"\|(\d+) ", created_by)
    if not m:
        return created_by
    n = int(m.group(1))
    parts = created_by[m.end() :].split(" ", n)
    args, rest = parts[:n], parts[n:]
    keep = [a for a in args if a.split("=", 1)[0] not in SITE_ARGS]
    if len(keep) == n:
        return created_by
    return (f"|{len(keep)} " + " ".join(keep) + " " if keep else "") + " ".join(rest)
