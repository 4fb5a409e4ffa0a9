#!/usr/bin/env python3
"""Contents probe, run inside an image: every byte the image ships, checked against its source.

    contents.py check --expected FILE       (FILE: JSON the contents suite writes from matrix.lock)

(A cmake-wheel builder stage writes its outputs list with wheel_outputs.py, which runs there alone.)

* dpkg: each file of each package of the lock's closure against its md5sums line (a diverted file
  where dpkg-divert put it), each conffile against the md5 in dpkg's status.
* Python: each file of each distribution with a RECORD, in every sys.path folder of every
  interpreter (venv, dist-packages, conda), against its sha256 and size there (lines without a
  hash, RECORD itself and .pyc files, are unchecked, as the RECORD format says; Debian's
  distributions have no RECORD: their files are in md5sums). Each distribution the lock records
  for the image must be installed, as the venv's interpreter finds it, at exactly that version.
* Components: /opt/rocmforge/outputs/<component>.sha256 from the builder stage that built it:
  `# rocmforge-outputs <component> <root>`, then sha256sum lines relative to <root>, a folder or
  `dist:<name>` (where that distribution is installed; pip unpacks `<x>.data/purelib/` there).

Each file is read once, in 1 MiB chunks, by two worker processes. Only EXCEPTIONS excuse a
difference; every file one excuses is reported under its key, with the reason.
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import glob
import hashlib
import io
import json
import multiprocessing
import os
import re
import stat
import subprocess
import sys
import time

from wheel_outputs import OUTPUTS_HEADER

CHUNK = 1 << 20
WORKERS = 2
DPKG_INFO, DPKG_STATUS, DPKG_DIVERSIONS = "/var/lib/dpkg/info", "/var/lib/dpkg/status", "/var/lib/dpkg/diversions"
DPKG_CONFIG = ("/etc/dpkg/dpkg.cfg", "/etc/dpkg/dpkg.cfg.d/*")
PRUNE_RECORDS = "/opt/rocmforge/prune/*.json"
OUTPUTS = "/opt/rocmforge/outputs"
VENV_PYTHON = "/opt/rocmforge/venv/bin/python"
INTERPRETERS = (VENV_PYTHON, "/usr/bin/python3*", "/usr/local/bin/python3*", "/opt/conda/bin/python",
                "/opt/conda/envs/*/bin/python")
WHEEL_DATA_RE = re.compile(r"^[^/]+\.data/(purelib|platlib)/")

# The only differences from a source that are not failures. Each key is what a reported excused
# file is filed under; "host" entries apply to the paths the suite passes (it reads them from the
# code that makes the change), the others are decided here from the image's own records.
EXCEPTIONS = {
    "pruned": "absent: a per-arch GPU data file of an arch no prune step kept; perarch.py prune deleted it "
              "in the RUN that installed its package (prune_archs), as /opt/rocmforge/prune/*.json record",
    "path-exclude": "absent: dpkg's own path-exclude setting (/etc/dpkg/dpkg.cfg.d) kept it from being unpacked",
    "conffile-not-held": "unchecked: dpkg's status has no md5 of this package for it ('newconffile'), or marks "
                         "it obsolete or remove-on-upgrade (a package that took it over has its own, checked)",
    "bootstrap": "absent or changed (host): the bootstrapped base's normalisation blanks or deletes it "
                 "(rocmforge/resolve/bootstrap.py BLANK, SCRUB, SOURCES, SHADOW, FSTAB)",
    "apt-sources": "absent or changed (host): the stack's apt_sources drops or replaces this list "
                   "(rocmforge/host/aptsources.py policy_script)",
    "base-as-shipped": "changed or absent (host) as the registry base, pinned by digest in matrix.lock, ships it: "
                       "the vendor's image differs from its own package there, and the image holds exactly the "
                       "base's bytes (sha256 read from a container of the base)",
    "pip-record": "changed: a wheel's own RECORD; pip rewrites it on install (adding INSTALLER, REQUESTED, "
                  "direct_url.json), and the installed RECORD is itself checked line by line",
}


def parse_md5sums(text: str) -> list[tuple[str, str]]:
    """(absolute path, md5 hex) per line of a dpkg md5sums file ("<md5>  <path relative to />")."""
    out = []
    for line in text.splitlines():
        digest, sep, path = line.partition("  ")
        if sep and re.fullmatch(r"[0-9a-f]{32}", digest) and path:
            out.append(("/" + path.lstrip("/"), digest))
    return out


def parse_status(text: str) -> dict[str, list[tuple[str, str, str]]]:
    """package -> [(conffile, md5, flags)] from the `Conffiles:` fields of dpkg's status file."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for para in text.split("\n\n"):
        name, in_conf = None, False
        for line in para.splitlines():
            name = line.split(":", 1)[1].strip() if line.startswith("Package:") else name
            parts = line.split()
            if line.startswith(" ") and in_conf and len(parts) >= 2:
                out.setdefault(name, []).append((parts[0], parts[1], " ".join(parts[2:])))
            elif not line.startswith(" "):
                in_conf = line.startswith("Conffiles:")
    return out


def parse_record(text: str, site: str) -> list[tuple[str, str | None, str | None, int | None]]:
    """(absolute path, algorithm, hex digest, size) per RECORD line; algorithm None for a line
    without a hash (RECORD itself, .pyc files), which the RECORD rules leave unchecked."""
    out = []
    for row in (r + ["", ""] for r in csv.reader(io.StringIO(text)) if r and r[0]):
        algo, _, b64 = row[1].partition("=")
        digest = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex() if b64 else None
        out.append((os.path.normpath(os.path.join(site, row[0])), algo if b64 else None, digest,
                    int(row[2]) if row[2].strip().isdigit() else None))
    return out


def parse_outputs(text: str, component: str) -> tuple[str, list[tuple[str, str]]]:
    """(root, [(path under root, sha256)]) of a builder stage's outputs list; ValueError if malformed."""
    lines = text.splitlines() or [""]
    if lines[0].split()[:3] != [*OUTPUTS_HEADER.split(), component] or len(lines[0].split()) != 4:
        raise ValueError(f"the first line is not `{OUTPUTS_HEADER}{component} <root>`")
    files = [(WHEEL_DATA_RE.sub("", rel), digest) for digest, _, rel in (ln.partition("  ") for ln in lines[1:])]
    bad = [rel or digest for rel, digest in files if not re.fullmatch(r"[0-9a-f]{64}", digest) or not rel]
    if bad or not files:
        raise ValueError(f"not a sha256sum line: {bad[0]}" if bad else "it lists no file")
    return lines[0].split()[3], files


def path_filters(patterns=DPKG_CONFIG) -> list[tuple[bool, str]]:
    """dpkg's path-include/path-exclude options in the order dpkg reads them: (excluded, glob)."""
    out = []
    for cfg in [c for pattern in patterns for c in sorted(glob.glob(pattern)) if os.path.isfile(c)]:
        for line in _read(cfg).splitlines():
            key, _, value = (x.strip() for x in line.partition("="))
            if key in ("path-exclude", "path-include") and value:
                out.append((key == "path-exclude", value))
    return out


def dpkg_filtered(path: str, filters) -> bool:
    """Whether dpkg's filters keep `path` from being unpacked: the last matching option decides
    (dpkg matches with fnmatch(3) without FNM_PATHNAME, so `*` crosses `/`)."""
    matching = [exclude for exclude, pattern in filters if fnmatch.fnmatchcase(path, pattern)]
    return bool(matching) and matching[-1]


def excused_by(path: str, problem: str, host: dict, kept, filters) -> str | None:
    """The EXCEPTIONS key that excuses `problem` ("missing" or "changed") at `path`, or None."""
    for key in ("bootstrap", "apt-sources"):
        if path in host.get(key, ()):
            return key
    shipped = host.get("base-as-shipped") or {}
    if path in shipped and shipped[path] == file_sha256(path):
        return "base-as-shipped"
    if problem == "missing" and kept is not None:
        # Beside this file in the image; imported here because a builder stage runs wheel-list alone.
        import perarch
        kind = perarch.data_dir_kind(os.path.dirname(path))
        arch = perarch.file_arch(os.path.basename(path), kind) if kind else None
        if arch is not None and arch not in kept:
            return "pruned"
    if problem == "missing" and dpkg_filtered(path, filters):
        return "path-exclude"
    return None


def kept_archs(pattern=PRUNE_RECORDS):
    """The archs every prune step of the image kept, or None when it was never pruned."""
    records = [set(json.loads(_read(path)).get("keep", [])) for path in sorted(glob.glob(pattern))]
    return set.intersection(*records) if records else None


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:       # paths are bytes to dpkg
        return f.read()


class Checks:
    """What each file must hash to, by source; then one pass over the files."""

    def __init__(self, host: dict):
        self.host, self.kept, self.filters = host, kept_archs(), path_filters()
        # path -> [(algorithm, hex digest, size or None, source, the file that says so)]
        self.want: dict[str, list[tuple[str, str, int | None, str, str]]] = {}
        self.problems: list[str] = []
        self.excused: dict[str, dict] = {}             # key -> {"why": EXCEPTIONS[key], "files": [...]}
        self.differing = {} if host.get("record-differing") else None     # path -> sha256 or None
        self.checked = {"dpkg_packages": 0, "dpkg_files": 0, "python_dists": 0, "python_files": 0, "outputs": 0}

    def expect(self, path, algo, digest, size, source, ref):
        self.want.setdefault(path, []).append((algo, digest, size, source, ref))

    def excuse(self, key, what):
        self.excused.setdefault(key, {"why": EXCEPTIONS[key], "files": []})["files"].append(what)

    def fail(self, path, source, problem, what):
        if self.differing is not None:          # a registry base, read for what it ships as it is
            self.differing[path] = file_sha256(path)
            return
        key = excused_by(path, problem, self.host, self.kept, self.filters)
        if key:
            self.excuse(key, f"{path} ({source})")
        else:
            self.problems.append(f"{path} ({source}): {what}")

    def dpkg(self, packages):
        lines = _read(DPKG_DIVERSIONS).splitlines() if os.path.exists(DPKG_DIVERSIONS) else []
        diverted = {lines[i]: (lines[i + 1], lines[i + 2]) for i in range(0, len(lines) - 2, 3)}   # from: (to, by)
        conffiles = parse_status(_read(DPKG_STATUS))
        if packages == "*":         # every installed package (a registry base: the vendor's set)
            packages = sorted({os.path.basename(p)[:-5].split(":")[0] for p in glob.glob(f"{DPKG_INFO}/*.list")})
        for pkg in packages:
            info = sorted(glob.glob(f"{DPKG_INFO}/{glob.escape(pkg)}.list")
                          + glob.glob(f"{DPKG_INFO}/{glob.escape(pkg)}:*.list"))
            if not info:
                self.problems.append(f"dpkg {pkg}: in the lock's closure but not installed: its files cannot be checked")
                continue
            self.checked["dpkg_packages"] += 1
            for lst in info:
                sums = lst[:-len(".list")] + ".md5sums"
                if not os.path.exists(sums):
                    if any(os.path.isfile(p) and not os.path.islink(p) for p in _read(lst).splitlines()):
                        self.problems.append(f"dpkg {pkg}: {sums} is missing: the package's files cannot be checked")
                    continue
                for path, digest in parse_md5sums(_read(sums)):
                    to, by = diverted.get(path, (path, pkg))
                    self.expect(to if by != pkg else path, "md5", digest, None, f"dpkg {pkg}", sums)
            for path, digest, flag in conffiles.get(pkg, ()):
                if digest == "newconffile" or {"obsolete", "remove-on-upgrade"} & set(flag.split()):
                    self.excuse("conffile-not-held", f"{path} (dpkg {pkg})")
                else:
                    self.expect(path, "md5", digest, None, f"dpkg {pkg}", f"the conffile md5 in {DPKG_STATUS}")

    def python(self, interpreters):
        """Every RECORD of every distribution the image's interpreters can see."""
        self.index = dist_index(interpreters)
        self.problems += [f"{py}: does not run: the distributions it sees cannot be listed"
                          for py, dists in self.index.items() if dists is None]
        self.index = index = {py: dists for py, dists in self.index.items() if dists is not None}
        seen = {os.path.realpath(d): d for dists in index.values() for _n, _v, d in dists}
        for info in sorted(seen.values()):
            record = os.path.join(info, "RECORD")
            if not os.path.isfile(record):
                continue            # a Debian package's distribution: its md5sums hold its files
            name, version = read_metadata(info)
            self.checked["python_dists"] += 1
            for path, algo, digest, size in parse_record(_read(record), os.path.dirname(info)):
                if algo in hashlib.algorithms_guaranteed:
                    self.expect(path, algo, digest, size, f"python {name} {version}", record)
                elif algo is not None:
                    self.problems.append(f"{path} (python {name} {version}): {record} names hash {algo!r}")

    def versions(self, wanted: dict):
        """Each distribution the lock records, at its version, as the venv's interpreter finds it."""
        found = self.found()
        for name, (version, source) in sorted(wanted.items()):
            have = found.get(normalise(name))
            if have is None:
                self.problems.append(f"python {name}: {source} records {version}, not installed")
            elif have[0] != version:
                self.problems.append(f"python {name}: {source} records {version}, installed {have[0]} "
                                     f"({have[1]}/METADATA)")

    def found(self) -> dict:
        """normalised name -> (version, metadata folder) of what the venv's interpreter (else the
        first interpreter) imports: the first of each name on its sys.path."""
        found = {}
        for name, version, info in reversed(self.index.get(VENV_PYTHON) or next(iter(self.index.values()), [])):
            found[normalise(name)] = (version, info)
        return found

    def outputs(self, components):
        sites = {n: os.path.dirname(info) for n, (_v, info) in self.found().items()}
        for comp in components:
            listing = f"{OUTPUTS}/{comp}.sha256"
            try:
                root, files = parse_outputs(_read(listing), comp)
                root = sites.get(normalise(root[5:]), root) if root.startswith("dist:") else root
                if root.startswith("dist:"):
                    raise ValueError(f"distribution {root[5:]} is not installed")
            except FileNotFoundError:
                self.problems.append(f"{listing} (component {comp}): missing: the builder stage's list of what it "
                                     "built is not in the image (built from templates older than that list?)")
                continue
            except (OSError, ValueError) as exc:
                self.problems.append(f"{listing} (component {comp}): {getattr(exc, 'strerror', None) or exc}")
                continue
            self.checked["outputs"] += 1
            for rel, digest in files:
                self.expect(os.path.join(root, rel), "sha256", digest, None, f"component {comp}", listing)

    def run(self):
        jobs = []
        for path, wants in self.want.items():
            try:
                st = os.lstat(path)
            except OSError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode):
                for source in {w[3] for w in wants}:
                    self.fail(path, source, "missing" if st is None else "changed", "missing" if st is None else
                              "not a regular file (a link, folder or other) where the source has one")
            else:
                jobs.append((st.st_size, path, sorted({w[0] for w in wants})))
        jobs.sort(reverse=True)            # the largest first: the two workers finish together
        with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
            for result in pool.imap_unordered(digest_file, [(p, a) for _s, p, a in jobs], 16):
                self.judge(*result)
        return len(jobs), sum(j[0] for j in jobs)

    def judge(self, path, size, digests, err):
        for algo, digest, want_size, source, ref in self.want[path]:
            kind = source.split()[0]
            if kind in ("dpkg", "python"):
                self.checked[f"{kind}_files"] += 1
            if err:
                self.fail(path, source, "changed", f"cannot be read: {err}")
            elif digests[algo] == digest and want_size in (None, size):
                continue
            elif source.startswith("component") and re.search(r"\.dist-info/RECORD$", path):
                self.excuse("pip-record", f"{path} ({source})")
            elif want_size not in (None, size):
                self.fail(path, source, "changed", f"{size} bytes, {ref} says {want_size}")
            else:
                self.fail(path, source, "changed", f"{'empty, ' if not size else ''}{algo} differs from {ref}")


def digest_file(job):
    """(path, size, {algorithm: hex}, error) of one file, read once in 1 MiB chunks."""
    path, algos = job
    hashers, buf, size = [hashlib.new(a) for a in algos], bytearray(CHUNK), 0
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb", buffering=0) as f:
            for n in iter(lambda: f.readinto(buf), 0):
                size += n
                for h in hashers:
                    h.update(memoryview(buf)[:n])
    except OSError as exc:
        return path, size, {}, exc.strerror or str(exc)
    return path, size, {a: h.hexdigest() for a, h in zip(algos, hashers)}, None


def file_sha256(path: str) -> str | None:
    """sha256 of a regular file (not followed through a link), None when there is none to read."""
    _p, _s, digests, err = digest_file((path, ["sha256"]))
    return None if err else digests["sha256"]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_metadata(info: str) -> tuple[str, str]:
    """(Name, Version) from a .dist-info/.egg-info folder's (or an .egg-info file's) headers."""
    fields = {}
    for meta in [p for p in (f"{info}/METADATA", f"{info}/PKG-INFO", info) if os.path.isfile(p)][:1]:
        for key, _, value in (line.partition(":") for line in _read(meta).split("\n\n")[0].splitlines()):
            fields.setdefault(key, value.strip())
    return fields.get("Name", os.path.basename(info).split("-")[0]), fields.get("Version", "")


def dist_index(patterns=INTERPRETERS) -> dict[str, list[tuple[str, str, str]]]:
    """interpreter -> [(name, version, metadata folder)] in its sys.path order (None: it does not run)."""
    out = {}
    for py in [p for pattern in patterns for p in sorted(glob.glob(pattern))
               if re.search(r"python[0-9.]*$", p) and os.access(p, os.X_OK)]:
        proc = subprocess.run([py, "-c", "import json, sys; print(json.dumps(sys.path))"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, universal_newlines=True)
        out[py] = None if proc.returncode else [
            read_metadata(f"{d}/{e}") + (f"{d}/{e}",) for d in json.loads(proc.stdout)
            if d and os.path.isdir(d) for e in sorted(os.listdir(d)) if e.endswith((".dist-info", ".egg-info"))]
    return out


def check(expected: dict) -> dict:
    start = time.monotonic()
    checks = Checks(expected.get("build_changes", {}))
    checks.dpkg(expected.get("packages", []))
    checks.python(INTERPRETERS)
    checks.versions({n: tuple(v) for n, v in expected.get("python", {}).items()})
    checks.outputs(expected.get("outputs", []))
    files, nbytes = checks.run()
    return {"problems": checks.problems, "excused": checks.excused, "checked": dict(checks.checked, files=files,
            bytes=nbytes), "seconds": round(time.monotonic() - start, 2),
            **({"differing": checks.differing} if checks.differing is not None else {})}


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="contents.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check").add_argument("--expected", required=True, help="the contents suite's JSON")
    args = parser.parse_args(argv)
    with open(args.expected, encoding="utf-8") as f:
        print(json.dumps(check(json.load(f)), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
