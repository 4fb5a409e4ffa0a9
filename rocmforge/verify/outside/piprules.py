"""The generated files' rules for what pip writes as it installs a locked wheel into a venv (its
.dist-info's INSTALLER, REQUESTED, direct_url.json and RECORD; the console scripts in the venv's
bin): judged against the wheel as read on the host (wheels.py), whose own files are expected paths
(expected._locked_wheels). A mixin of rules.Rules, which dispatches to these by generated.py's names."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import posixpath
from typing import TYPE_CHECKING

from rocmforge.verify.outside.wheels import INSTALLER, Wheel, record_hash

if TYPE_CHECKING:
    from collections.abc import Callable

    from rocmforge.verify.outside.expected import Expected
    from rocmforge.verify.outside.imagefs import Have


class PipRules:
    files: dict[str, Have]
    exp: Expected
    contents: Callable[[str], bytes | None]

    def _as_recorded(self, rel: str, have: Have, what: str) -> str | None:
        want = self.exp.paths.get(rel)
        if want is None:
            return f"{what}, and no builder stage handed it over"
        return (
            None
            if (want.type, want.mode, want.uid, want.gid, want.data) == have.brief()
            else f"differs from {want.source}"
        )

    def venv_bin(self, rel: str, have: Have) -> str | None:
        return self._as_recorded(rel, have, "a program on PATH (the venv's bin) no locked wheel's entry point names")

    def pip_written(self, rel: str, have: Have) -> str | None:
        dist_info, _, name = rel.rpartition("/")
        found = self.exp.records.get(f"{dist_info}/RECORD")
        if found is None:
            return self._as_recorded(rel, have, "belongs to a distribution no wheel of the lock installs")
        wheel, site, rows = found
        if (have.type, have.mode, have.uid, have.gid) != ("f", 0o644, 0, 0):
            return f"is not the root-owned 0644 file pip writes for {wheel.what}"
        if name == "INSTALLER":
            return None if have.data == hashlib.sha256(INSTALLER).hexdigest() else "is not pip's INSTALLER ('pip')"
        if name == "REQUESTED":
            return None if have.size == 0 else "is not the empty file pip writes"
        data = self.contents(rel)
        text = None if data is None else data.decode(errors="replace")
        if text is None:
            return "cannot be read from the image's layers"
        if name == "direct_url.json":
            return self._direct_url(text, wheel)
        return self._record(text, wheel, site, rows, dist_info)

    def _direct_url(self, text: str, wheel: Wheel) -> str | None:
        try:
            doc = json.loads(text)
            url, info = doc["url"], doc.get("archive_info") or {}
        except (ValueError, KeyError, TypeError):
            return "is not the JSON pip writes"
        hashes = set((info.get("hashes") or {}).values()) | {str(info.get("hash", "")).removeprefix("sha256=")}
        if not url.endswith("/" + wheel.file) or hashes - {"", wheel.sha256}:
            return f"names {url}, not {wheel.file} at its locked sha256"
        return None

    def _record(self, text: str, wheel: Wheel, site: str, rows: dict[str, str], dist_info: str) -> str | None:
        """RECORD as pip writes it for the wheel: each of its files with the hash and size read from
        the wheel, pip's own files with theirs, byte-compiled files of its sources without. Every
        row that is not is named ("; " between them)."""
        got = {row[0]: ",".join(row[1:3]) for row in csv.reader(io.StringIO(text)) if row}
        wrong: list[str] = []
        for path, want in sorted(rows.items()):
            if path not in got:
                wrong.append(f"does not list {path}, which {wheel.what} ships")
            elif want == "":  # a script no known pip template regenerates: the builder stage's record judges it
                have = self.files.get(posixpath.normpath(f"{site}/{path}"))
                if have is None or got[path] != f"{record_hash(have.data)},{have.size}":
                    wrong.append(f"records {path} as {got[path]}, which is not the image's file")
            elif got[path] != want:
                wrong.append(f"records {path} as {got[path]}, {wheel.what} has {want}")
        for path, value in sorted(got.items()):
            target = posixpath.normpath(f"{site}/{path}")
            folder, _, name = target.rpartition("/")
            if path in rows or (folder == dist_info and name in ("RECORD", "REQUESTED", "direct_url.json")):
                have = self.files.get(target)
                if (
                    name != "RECORD"
                    and path not in rows
                    and (have is None or value != f"{record_hash(have.data)},{have.size}")
                ):
                    wrong.append(f"records {path} as {value}, which is not the image's file")
                continue
            source = f"{folder.removesuffix('/__pycache__')}/{name.split('.', 1)[0]}.py"
            if folder.endswith("/__pycache__") and name.endswith(".pyc") and posixpath.relpath(source, site) in rows:
                continue
            wrong.append(f"lists {path}, which neither {wheel.what} nor pip's install writes")
        return "; ".join(wrong) or None
