"""Benchmark: verify + parse + resolve on NVIDIA's real Packages, and peak RSS on 50,000 stanzas.

Targets (issue 4): < 100 ms for the real 178 KB Packages; < 150 MB peak RSS for a synthetic
50,000-stanza Packages. Baseline, measured in the same run: a plain ``gpg --verify`` subprocess
plus python-debian parsing the same Packages (no model, no resolution).

Run: ``.venv/bin/python bench/bench_resolve.py`` (or ``make bench``).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debian import deb822  # noqa: E402

from mirror.disk.trust import default_keyring_path, open_keyring  # noqa: E402
from mirror.index.apt import parse_packages, parse_release  # noqa: E402
from mirror.model import PackageFormat  # noqa: E402
from mirror.release.selectors import VersionSelector  # noqa: E402
from mirror.sync.resolve import resolve  # noqa: E402

REAL = ROOT / "tests" / "data" / "real-upstream" / "stable" / "deb" / "amd64"
RUNS = 15
STANZAS = 50_000


def median_ms(fn, runs: int = RUNS) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def bench_real() -> dict[str, float]:
    inrelease = (REAL / "InRelease").read_bytes()
    packages = (REAL / "Packages").read_bytes()
    with open_keyring() as keyring:

        def ours() -> None:
            verified = keyring.verify_clearsigned(inrelease)
            release = parse_release(verified.text)
            assert hashlib.sha512(packages).hexdigest() == release.files["Packages"].sha512
            parsed = parse_packages(packages.decode())
            result = resolve(parsed, VersionSelector.parse("1.17.8"), PackageFormat.DEB)
            assert len(result.packages) == 4

        ours_ms = median_ms(ours)

    def ours_with_keyring() -> None:
        with open_keyring() as keyring:
            verified = keyring.verify_clearsigned(inrelease)
        resolve(parse_packages(packages.decode()), VersionSelector.parse("latest"), PackageFormat.DEB)
        assert verified.text

    cold_ms = median_ms(ours_with_keyring, runs=5)

    with tempfile.TemporaryDirectory() as home:
        subprocess.run(
            ["gpg", "--homedir", home, "--batch", "--quiet", "--import", str(default_keyring_path())],
            check=True,
            capture_output=True,
        )
        (Path(home) / "InRelease").write_bytes(inrelease)

        def baseline() -> None:
            subprocess.run(
                ["gpg", "--homedir", home, "--batch", "--verify", str(Path(home) / "InRelease")],
                check=True,
                capture_output=True,
            )
            assert (
                len(list(deb822.Packages.iter_paragraphs(packages.decode().splitlines(), use_apt_pkg=False)))
                == 170
            )

        baseline_ms = median_ms(baseline)
    return {"ours_ms": ours_ms, "ours_with_keyring_open_ms": cold_ms, "baseline_ms": baseline_ms}


def synthetic_packages(count: int) -> bytes:
    """``count`` stanzas built from the real 1.17.8 stanzas, one train per synthetic version."""
    text = (REAL / "Packages").read_text()
    templates = [s for s in text.split("\n\n") if re.search(r"^Version: 1\.17\.8-1$", s, re.M)]
    out: list[str] = []
    n = 0
    while len(out) < count:
        version = f"1.{100 + n // 100}.{n % 100}"  # stays below the toolkit's << 2.0.0
        out += [t.replace("1.17.8", version) for t in templates]
        n += 1
    return ("\n\n".join(out[:count]) + "\n").encode()


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from plumbing.gpg import Keyring
from mirror.index.repo import load_apt_repo
from tests.fakes import FakeFetcher
from mirror.sync.resolve import resolve
from mirror.release.selectors import VersionSelector
from pathlib import Path
work = Path(sys.argv[2])
mode = sys.argv[3]
base = "http://127.0.0.1:1/stable/deb/amd64"
start = time.perf_counter()
count = 0
if mode == "full":
    fetcher = FakeFetcher().expect(base + "/InRelease", (work / "InRelease").read_bytes())
    fetcher.expect(base + "/Packages.xz", (work / "Packages.xz").read_bytes())
    with Keyring.open([work / "key.asc"]) as keyring:
        snapshot = load_apt_repo(fetcher, base, keyring)
    result = resolve(snapshot.packages, VersionSelector.parse("latest"), snapshot.format)
    count = len(snapshot.packages)
    assert len(result.packages) == 4, result
elapsed = time.perf_counter() - start
# VmHWM is this process's own high-water mark; ru_maxrss also counts the parent's memory from
# before exec (Linux carries it across fork+exec), so it overstates a child of a big parent.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"packages": count, "seconds": elapsed, "hwm_mb": hwm / 1024,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_synthetic() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        home = work / "gnupg"
        home.mkdir(mode=0o700)
        gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
        subprocess.run(
            [
                *gpg,
                "--passphrase",
                "",
                "--quick-gen-key",
                "bench <bench@example.invalid>",
                "ed25519",
                "sign",
                "never",
            ],
            check=True,
        )
        (work / "key.asc").write_bytes(
            subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True).stdout
        )
        packages = synthetic_packages(STANZAS)
        xz = lzma.compress(packages, preset=6)
        (work / "Packages.xz").write_bytes(xz)
        release = (
            "Origin: bench\nSHA512:\n"
            f" {hashlib.sha512(packages).hexdigest()} {len(packages)} Packages\n"
            f" {hashlib.sha512(xz).hexdigest()} {len(xz)} Packages.xz\n"
        )
        signed = subprocess.run(
            [*gpg, "--clearsign", "--digest-algo", "SHA512"],
            input=release.encode(),
            check=True,
            capture_output=True,
        ).stdout
        (work / "InRelease").write_bytes(signed)
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
        results = {}
        for mode in ("imports-only", "full"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(ROOT), str(work), mode],
                check=False,
                capture_output=True,
                text=True,
            )
            if out.returncode:
                raise SystemExit(out.stderr)
            results[mode] = json.loads(out.stdout)
        return {
            "stanzas": results["full"]["packages"],
            "packages_mb": len(packages) / 2**20,
            "packages_xz_mb": len(xz) / 2**20,
            "peak_rss_mb": results["full"]["hwm_mb"],
            "interpreter_and_imports_rss_mb": results["imports-only"]["hwm_mb"],
            "getrusage_maxrss_mb": results["full"]["maxrss_mb"],
            "seconds": results["full"]["seconds"],
        }


def main() -> int:
    real = bench_real()
    print(
        f"real Packages (178 KB, 170 stanzas): verify+parse+resolve {real['ours_ms']:.1f} ms median of {RUNS} "
        f"(target < 100 ms); baseline gpg --verify + python-debian parse {real['baseline_ms']:.1f} ms; "
        f"ratio {real['ours_ms'] / real['baseline_ms']:.2f}x"
    )
    print(
        f"  including Keyring.open (temp GNUPGHOME + key import) each time: {real['ours_with_keyring_open_ms']:.1f} ms"
    )
    syn = bench_synthetic()
    print(
        f"synthetic Packages ({syn['stanzas']} stanzas, {syn['packages_mb']:.1f} MB, xz {syn['packages_xz_mb']:.1f} MB): "
        f"load_apt_repo + resolve peak RSS {syn['peak_rss_mb']:.0f} MB (target < 150 MB; interpreter + imports alone "
        f"{syn['interpreter_and_imports_rss_mb']:.0f} MB), {syn['seconds']:.1f} s"
    )
    print(
        f"  (peak RSS is the child's VmHWM; getrusage ru_maxrss says {syn['getrusage_maxrss_mb']:.0f} MB "
        "because Linux carries the parent's pre-exec high-water mark into the child)"
    )
    ok = real["ours_ms"] < 100 and syn["peak_rss_mb"] < 150
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("LC_ALL", "C")
    sys.exit(main())
