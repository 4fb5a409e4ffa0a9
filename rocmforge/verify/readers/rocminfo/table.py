"""`build.py rocminfo FILE`: a rocminfo output summed up as plain text."""

from __future__ import annotations

from rocmforge.verify.readers.rocminfo.model import Agent, RocmInfo, discrete_only_visible_devices

_TITLES = ("agent", "type", "hip", "name", "CUs", "kind", "marketing name")


def _rows(agents: tuple[Agent, ...]) -> list[tuple[str, ...]]:
    """One row per agent; GPUs get their HIP device number (CPU agents are not numbered)."""
    rows: list[tuple[str, ...]] = []
    gpu_no = 0
    for a in agents:
        hip = kind = ""
        if a.device_type == "GPU":
            hip = str(gpu_no)
            gpu_no += 1
            kind = "integrated" if a.is_apu else "discrete"
        cus = "" if a.compute_units is None else str(a.compute_units)
        desc = a.marketing_name if a.marketing_name and a.marketing_name != a.name else ""
        rows.append((str(a.index), a.device_type or "?", hip, a.name or "?", cus, kind, desc))
    return rows


def format_table(info: RocmInfo) -> str:
    """A plain-text summary: a status line, one line per agent, then problems and a hint."""
    head = f"driver: {'loaded' if info.driver_loaded else 'NOT loaded'}"
    head += f"   runtime: {info.runtime_version or '?'}"
    head += f"   GPUs: {', '.join(info.gpus) if info.gpus else 'none'}"
    lines = [head]
    rows = _rows(info.agents)
    if rows:
        # the last column (marketing name) is not padded: it is free text and ends the line
        widths = [max(len(r[i]) for r in (*rows, _TITLES)) for i in range(len(_TITLES) - 1)]

        def fmt(r: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]

        lines.append(fmt(_TITLES).rstrip())
        lines += [fmt(r).rstrip() for r in rows]
    else:
        lines.append("no agents")
    lines += [f"problem: {p}" for p in info.problems]
    vis = discrete_only_visible_devices(info)
    if vis is not None:
        lines.append(f"hint: HIP_VISIBLE_DEVICES={vis} keeps only the discrete GPU(s)")
    return "\n".join(lines)
