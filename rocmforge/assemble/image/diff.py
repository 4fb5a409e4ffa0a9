"""The first thing that differs between two images, found by streaming each once, and said in a
line: which layer (named by the Dockerfile step that made it), which path, which attribute."""

from __future__ import annotations

import hashlib
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rocmforge.assemble.image.archive import read_manifest, walk_archive
from rocmforge.assemble.image.layers import layer_path
from rocmforge.assemble.image.tarcodec import BLK, CHR, REG, TYPE_NAMES, TarReader
from rocmforge.shared.errors import ImageArchiveError
from rocmforge.shared.files import iso_utc
from rocmforge.shared.streams import HashingWindow, Stream

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

# The attributes of an entry, in the order a difference is looked for.
FIELDS = ("type", "linkname", "size", "content", "mode", "owner", "device", "xattrs", "mtime")


def _display(name: bytes) -> str:
    return "/" + layer_path(name).decode(errors="replace")


def summarise_layer(src: Stream) -> list[tuple[str, dict]]:
    """Every entry of a layer tar (a stream or window) as (path, attributes), in archive order."""
    out = []
    reader = TarReader(src)
    for e in reader:
        owner = f"{e.uid}:{e.gid}"
        if e.uname or e.gname:
            owner += f" ({e.uname.decode(errors='replace')}:{e.gname.decode(errors='replace')})"
        attrs = {
            "type": TYPE_NAMES[e.type],
            "linkname": e.linkname.decode(errors="replace"),
            "size": e.size,
            "mode": f"{e.mode & 0o7777:04o}",
            "owner": owner,
            "device": f"{e.devmajor},{e.devminor}" if e.type in (CHR, BLK) else "",
            "xattrs": sorted((k.decode(errors="replace"), v.hex()) for k, v in e.xattrs.items()),
            "mtime": e.mtime,
            "content": "",
        }
        if e.type == REG:
            h = hashlib.sha256()
            for piece in reader.data():
                h.update(piece)
            attrs["content"] = h.hexdigest()
        out.append((_display(e.name), attrs))
    return out


def compare_layers(a: list[tuple[str, dict]], b: list[tuple[str, dict]]) -> dict | None:
    """The first difference between two layer summaries, in path order."""
    da, db = dict(a), dict(b)
    for path in sorted(da.keys() | db.keys(), key=lambda p: tuple(p.split("/"))):
        if path not in da or path not in db:
            return {"path": path, "field": "presence", "a": path in da, "b": path in db}
        for f in FIELDS:
            if da[path][f] != db[path][f]:
                return {"path": path, "field": f, "a": da[path][f], "b": db[path][f]}
    if [p for p, _ in a] != [p for p, _ in b]:
        first = next(i for i, (x, y) in enumerate(zip(a, b)) if x[0] != y[0])
        return {"path": a[first][0], "field": "order", "a": a[first][0], "b": b[first][0]}
    return None


def _json_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def compare_configs(a: object, b: object, path: str = "") -> dict | None:
    """The first differing field of two image configs (keys in sorted order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys()):
            if k not in a or k not in b:
                return {"where": "config", "field": _json_path(path, k), "a": a.get(k), "b": b.get(k)}
            d = compare_configs(a[k], b[k], _json_path(path, k))
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = compare_configs(x, y, _json_path(path, i))
            if d:
                return d
        if len(a) != len(b):
            i = min(len(a), len(b))
            return {
                "where": "config",
                "field": _json_path(path, i),
                "a": a[i] if i < len(a) else None,
                "b": b[i] if i < len(b) else None,
            }
        return None
    if a != b or type(a) is not type(b):
        return {"where": "config", "field": path or "(root)", "a": a, "b": b}
    return None


def _layer_step(config: dict, index: int) -> str | None:
    steps = [h.get("created_by", "") for h in config.get("history") or [] if not h.get("empty_layer")]
    return steps[index] if index < len(steps) else None


def _scan(client: Engine, ref: str, want: str | None) -> tuple[dict, list | None]:
    """Streams ref once: its config, and the summary of its layer whose diff ID is want."""

    def on_layer(name: str, win: HashingWindow) -> list[tuple[str, dict]] | None:
        if want is None:
            win.drain()
            return None
        summary = summarise_layer(win)
        win.drain()
        return summary if win.digest() == want else None

    small, links, layers = walk_archive(client.export(ref), on_layer)
    config, _, _ = read_manifest(small, links)
    found = [s for s in layers.values() if s is not None]
    return config, (found[0] if found else None)


def _first_differing_layer(la: list[str], lb: list[str]) -> int | None:
    idx = next((i for i in range(min(len(la), len(lb))) if la[i] != lb[i]), None)
    if idx is None and len(la) != len(lb):
        idx = min(len(la), len(lb))
    return idx


def diff_images(client: Engine, a: str, b: str) -> dict | None:
    """None when a and b have the same image ID; else their first difference: the first layer
    (in image order) whose diff IDs differ, at its first differing path, then the config.
    Each image is streamed once and nothing is written."""
    ia, ib = client.inspect(a), client.inspect(b)
    if ia["Id"] == ib["Id"]:
        return None
    la = (ia.get("RootFS") or {}).get("Layers") or []
    lb = (ib.get("RootFS") or {}).get("Layers") or []
    idx = _first_differing_layer(la, lb)
    want_a = la[idx] if idx is not None and idx < len(la) else None
    want_b = lb[idx] if idx is not None and idx < len(lb) else None
    with ThreadPoolExecutor(max_workers=2) as pool:  # the engine exports both at once
        fa, fb = pool.submit(_scan, client, a, want_a), pool.submit(_scan, client, b, want_b)
        (cfg_a, sum_a), (cfg_b, sum_b) = fa.result(), fb.result()
    if idx is None:
        return compare_configs(cfg_a, cfg_b) or {
            "where": "config",
            "field": "(serialisation)",
            "a": ia["Id"],
            "b": ib["Id"],
        }
    where = {
        "where": "layer",
        "index": idx,
        "created_by": _layer_step(cfg_a, idx) if want_a else _layer_step(cfg_b, idx),
    }
    if want_a is None or want_b is None:
        return {**where, "path": None, "field": "presence", "a": want_a, "b": want_b}
    if sum_a is None or sum_b is None:
        raise ImageArchiveError(f"layer {idx} of {a if sum_a is None else b} was not found in its archive")
    d = compare_layers(sum_a, sum_b)
    if d:
        return {**where, **d}
    return {**where, "path": None, "field": "encoding", "a": want_a, "b": want_b}


def step_text(created_by: str | None) -> str:
    """A history line as the Dockerfile step it came from: `RUN ...`, `COPY ...`."""
    s = (created_by or "").strip()
    i = s.find(" -c ")
    if i >= 0 and re.search(r"(^|\s)/\S*sh$", s[:i].split(" -")[0]):
        s = s[i + 4 :].strip()
        s = s[len("#(nop)") :].strip() if s.startswith("#(nop)") else "RUN " + s
    return s if len(s) <= 80 else s[:79] + "…"


def _value(v: object) -> str:
    text = v if isinstance(v, str) else json.dumps(v)
    return text if len(text) <= 60 else text[:59] + "…"


def describe_difference(diff: dict | None) -> str:
    """One line for a diff_images result."""
    if diff is None:
        return "the images are identical"
    # the differing values, as compare_layers and compare_configs found them: their type goes with the field
    a: Any = diff.get("a")
    b: Any = diff.get("b")
    f = diff["field"]
    if diff["where"] == "config":
        return f"config {f} differs ({_value(a)} vs {_value(b)})"
    where = f"layer {diff['index']}"
    if diff.get("created_by"):
        where += f" ({step_text(diff['created_by'])})"
    path = diff.get("path")
    if f == "presence":
        if path is None:
            return f"{where}: only in the {'first' if a else 'second'} image ({_value(a or b)})"
        return f"{where}: {path} exists only in the {'first' if a else 'second'} image"
    if f == "content":
        return f"{where}: {path} content differs (sha256 {a[:12]}… vs {b[:12]}…)"
    if f == "order":
        return f"{where}: the same entries in another order (first {_value(a)} vs {_value(b)})"
    if f == "encoding":
        return f"{where}: same files and metadata but different tar bytes (diff IDs {a[7:19]}… vs {b[7:19]}…)"
    if f == "mtime":
        return f"{where}: {path} mtime differs ({iso_utc(a)} vs {iso_utc(b)})"
    return f"{where}: {path} {f} differs ({_value(a)} vs {_value(b)})"
