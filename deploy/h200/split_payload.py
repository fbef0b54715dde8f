#!/usr/bin/env python3
"""Split the packed site into chunk folders and write the manifest and checksums.

``.payload/cN/`` gets one part of ``site.tar.xz`` (at most ``--chunk-mib`` MiB) plus a copy of
``MANIFEST.json`` (versions, parts, sizes, sha256 of every part and of the whole archive)
and ``SHA256SUMS`` (``sha256sum -c`` format), so whichever chunk reaches the node first
already says what the others must be. The node checks both before it unpacks
(``node.py install``). Standard library only.

usage: split_payload.py --archive SITE.tar.xz --site SITE_DIR --out .payload --chunk-mib N
                        [--source TEXT] [--removed PATH]... [--not-carried NAME=WHY]...
       split_payload.py --rechunk --out .payload --chunk-mib N

``--rechunk`` cuts a built payload again, without building it: a call to the node carries
the repository's tracked files and one chunk, 64 MiB in all, so chunks cut for a smaller
repository stop fitting as it grows. It joins the parts, checks them against the manifest
(each part's sha256 and the archive's), and writes the chunks and both files again, the
manifest's other fields as they were.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


def site_packages(site: Path) -> dict[str, str]:
    """name -> version, from the site's ``NAME-VERSION.dist-info`` folders."""
    out = {}
    for d in sorted(site.glob("*.dist-info")):
        name, _, version = d.name.removesuffix(".dist-info").partition("-")
        out[name.lower().replace("_", "-")] = version
    return out


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def split(archive: Path, out: Path, chunk: int) -> list[dict[str, Any]]:
    parts = []
    with open(archive, "rb") as f:
        n = 0
        while block := f.read(chunk):
            name = f"{archive.name}.part{n:02d}"
            folder = out / f"c{n + 1}"
            folder.mkdir(parents=True)
            (folder / name).write_bytes(block)
            parts.append({"file": name, "chunk": folder.name, "bytes": len(block),
                          "sha256": hashlib.sha256(block).hexdigest()})
            n += 1
    return parts


def write(out: Path, manifest: dict[str, Any]) -> None:
    """``MANIFEST.json`` and ``SHA256SUMS`` into every chunk folder the manifest names."""
    text = json.dumps(manifest, indent=1) + "\n"
    sums = "".join(f"{p['sha256']}  {p['file']}\n" for p in manifest["parts"])
    for p in manifest["parts"]:
        folder = out / str(p["chunk"])
        (folder / "MANIFEST.json").write_text(text)
        (folder / "SHA256SUMS").write_text(sums)


def rechunk(out: Path, chunk_mib: int) -> dict[str, Any]:
    """Cut ``out``'s payload again into parts of at most ``chunk_mib`` MiB (see the doc)."""
    found = sorted(out.glob("c*/MANIFEST.json"))
    if not found:
        raise SystemExit(f"no {out}/c*/MANIFEST.json: build a payload first (build_payload.sh)")
    manifest = json.loads(found[0].read_text())
    staging = out.with_name(out.name + ".rechunk")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    archive = staging / manifest["archive"]["name"]
    try:
        with open(archive, "wb") as joined:
            for p in manifest["parts"]:
                part = out / p["chunk"] / p["file"]
                if not part.is_file() or sha256_file(part) != p["sha256"]:
                    raise SystemExit(f"{part}: missing, or not the part the manifest names")
                joined.write(part.read_bytes())
        if sha256_file(archive) != manifest["archive"]["sha256"]:
            raise SystemExit("the joined parts differ from the archive the manifest names")
    except SystemExit:
        shutil.rmtree(staging)  # the chunks there stay as they were
        raise
    chunks = staging / "chunks"
    new = {**manifest, "chunk_max_bytes": chunk_mib * MIB,
           "parts": split(archive, chunks, chunk_mib * MIB)}
    write(chunks, new)
    for old in out.glob("c*"):
        shutil.rmtree(old)
    for folder in chunks.iterdir():
        folder.rename(out / folder.name)
    shutil.rmtree(staging)
    return new


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archive", type=Path)
    ap.add_argument("--site", type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--chunk-mib", required=True, type=int)
    ap.add_argument("--rechunk", action="store_true",
                    help="cut --out's built payload again (no --archive, --site)")
    ap.add_argument("--source", default="", help="where servesweep was built from")
    ap.add_argument("--removed", action="append", default=[], help="a path left out")
    ap.add_argument("--not-carried", action="append", default=[], help="NAME=WHY")
    args = ap.parse_args(argv)
    if args.rechunk:
        new = rechunk(args.out, args.chunk_mib)
        print(f"{len(new['parts'])} chunk(s) of at most {args.chunk_mib} MiB in {args.out}: "
              + ", ".join(str(p["chunk"]) for p in new["parts"]))
        return
    if args.archive is None or args.site is None:
        ap.error("--archive and --site are needed to split a new payload")
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    parts = split(args.archive, args.out, args.chunk_mib * MIB)
    packages = site_packages(args.site)
    manifest = {
        "format": 1,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "node": {"python": "cp312", "platform": "manylinux x86_64",
                 "already_there": "deploy/h200/device_pkgs.txt"},
        "servesweep": {"version": packages.get("servesweep", "?"), "source": args.source,
                       "native_read_pass": any(args.site.glob("actors/loadgen/_fastread*.so"))},
        "archive": {"name": args.archive.name, "bytes": args.archive.stat().st_size,
                    "sha256": sha256_file(args.archive)},
        "site_bytes": tree_bytes(args.site),
        "chunk_max_bytes": args.chunk_mib * MIB,
        "parts": parts,
        "packages": packages,
        "removed": args.removed,
        "not_carried": dict(nc.split("=", 1) for nc in args.not_carried),
    }
    write(args.out, manifest)
    total = sum(p["bytes"] for p in parts)
    print(f"{len(parts)} chunk(s) of at most {args.chunk_mib} MiB, {total / MIB:.1f} MiB in all "
          f"(site {manifest['site_bytes'] / MIB:.0f} MiB unpacked, {len(packages)} packages):")
    for p in parts:
        print(f"  {args.out.name}/{p['chunk']}/{p['file']}  {p['bytes'] / MIB:5.1f} MiB  "
              f"sha256 {str(p['sha256'])[:16]}...")
    os.sync()


if __name__ == "__main__":
    main()
