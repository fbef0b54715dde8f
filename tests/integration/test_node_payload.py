"""The node's payload (deploy/h200): split_payload.py cuts a site archive into chunk folders
with a manifest and checksums; node.py keeps each carried chunk, names the chunks still to
carry, refuses a damaged part, and unpacks the site once every part checks out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conftest import ROOT

H200 = ROOT / "deploy" / "h200"
MIB = 1 << 20


def _build(tmp_path: Path) -> Path:
    """A tiny site (a 1.5 MiB file that xz cannot shrink, a dist-info) split into 1 MiB
    chunks under ``repo/.payload``; returns ``repo``."""
    site = tmp_path / "site"
    (site / "demo-1.2.dist-info").mkdir(parents=True)
    (site / "demo").mkdir()
    (site / "demo" / "blob.bin").write_bytes(os.urandom(3 * MIB // 2))
    (site / "demo" / "__init__.py").write_text("VALUE = 42\n")
    archive = tmp_path / "site.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(site, arcname=".")
    repo = tmp_path / "repo"
    subprocess.run([sys.executable, str(H200 / "split_payload.py"), "--archive", str(archive),
                    "--site", str(site), "--out", str(repo / ".payload"), "--chunk-mib", "1",
                    "--source", "test", "--not-carried", "mlflow=not needed"], check=True,
                   capture_output=True)
    return repo


def _node(repo: Path, node: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, H200_NODE_DIR=str(node), H200_NODE_CHECK="skip")
    env.pop("H200_NODE_SITE", None)
    return subprocess.run([sys.executable, str(H200 / "node.py"), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_manifest_lists_every_part_with_its_chunk_size_and_checksum(tmp_path):
    repo = _build(tmp_path)
    chunks = sorted(p.name for p in (repo / ".payload").iterdir())
    assert chunks == ["c1", "c2"]
    manifest = json.loads((repo / ".payload" / "c1" / "MANIFEST.json").read_text())
    assert manifest == json.loads((repo / ".payload" / "c2" / "MANIFEST.json").read_text())
    assert [(p["chunk"], p["file"]) for p in manifest["parts"]] == [
        ("c1", "site.tar.xz.part00"), ("c2", "site.tar.xz.part01")]
    assert all(p["bytes"] <= MIB == manifest["chunk_max_bytes"] for p in manifest["parts"])
    assert manifest["packages"] == {"demo": "1.2"}
    assert manifest["not_carried"] == {"mlflow": "not needed"}
    sums = (repo / ".payload" / "c2" / "SHA256SUMS").read_text().splitlines()
    assert [line.split()[1] for line in sums] == ["site.tar.xz.part00", "site.tar.xz.part01"]


def test_chunks_carried_one_call_at_a_time_then_installed(tmp_path):
    repo, node = _build(tmp_path), tmp_path / "node"
    later = tmp_path / "later"
    shutil.move(repo / ".payload" / "c2", later)  # the first call carries c1 only
    first = _node(repo, node, "stash")
    assert first.returncode == 0 and "1 of 2 part(s) here; still to carry: .payload/c2" in \
        first.stdout
    early = _node(repo, node, "install")
    assert early.returncode == 2
    assert "missing site.tar.xz.part01 (carry .payload/c2 in a call" in early.stderr
    shutil.move(later, repo / ".payload" / "c2")  # the next call carries c2
    done = _node(repo, node, "install")
    assert done.returncode == 0, done.stderr
    assert "2 part(s) verified" in done.stdout
    assert (node / "site" / "demo" / "__init__.py").read_text() == "VALUE = 42\n"
    again = _node(repo, node, "install")
    assert again.returncode == 0 and "already unpacked" in again.stdout


def test_a_damaged_part_is_refused_naming_the_chunk_to_carry_again(tmp_path):
    repo, node = _build(tmp_path), tmp_path / "node"
    part = repo / ".payload" / "c2" / "site.tar.xz.part01"
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    bad = _node(repo, node, "install")
    assert bad.returncode == 2
    assert "site.tar.xz.part01 is damaged" in bad.stderr and ".payload/c2 again" in bad.stderr
    assert not (node / "site").exists()


def test_a_built_payload_cut_again_installs_the_same_site(tmp_path):
    repo, node = _build(tmp_path), tmp_path / "node"
    before = json.loads((repo / ".payload" / "c1" / "MANIFEST.json").read_text())
    subprocess.run([sys.executable, str(H200 / "split_payload.py"), "--rechunk", "--out",
                    str(repo / ".payload"), "--chunk-mib", "2"], check=True, capture_output=True)
    assert sorted(p.name for p in (repo / ".payload").iterdir()) == ["c1"]
    after = json.loads((repo / ".payload" / "c1" / "MANIFEST.json").read_text())
    assert after["archive"] == before["archive"] and after["packages"] == before["packages"]
    assert [(p["chunk"], p["bytes"]) for p in after["parts"]] == [
        ("c1", before["archive"]["bytes"])]
    assert after["chunk_max_bytes"] == 2 * MIB
    done = _node(repo, node, "install")
    assert done.returncode == 0, done.stderr
    assert (node / "site" / "demo" / "__init__.py").read_text() == "VALUE = 42\n"
    damaged = _build(tmp_path / "again")
    part = damaged / ".payload" / "c2" / "site.tar.xz.part01"
    part.write_bytes(part.read_bytes()[:-1])
    bad = subprocess.run([sys.executable, str(H200 / "split_payload.py"), "--rechunk", "--out",
                          str(damaged / ".payload"), "--chunk-mib", "2"], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "site.tar.xz.part01" in bad.stderr
    assert sorted(p.name for p in (damaged / ".payload").iterdir()) == ["c1", "c2"]
    assert not (damaged / ".payload.rechunk").exists()
