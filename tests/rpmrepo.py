"""Build a small real yum repository with rpmbuild and createrepo_c (stand-ins with NVIDIA's relations)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SPEC = """\
Name: nvidia-container-toolkit
Version: {version}
Release: 1
Epoch: 0
Summary: stand-in toolkit
License: Apache-2.0
BuildArch: x86_64
Requires: nvidia-container-toolkit-base = %{{version}}-%{{release}}
Requires: libnvidia-container-tools >= {version}-1, libnvidia-container-tools < 2.0.0
Requires: /bin/sh
Requires: (glibc or musl)
Conflicts: nvidia-container-runtime <= 3.5.0-1
Obsoletes: nvidia-container-runtime-hook
%description
stand-in

%package -n nvidia-container-toolkit-base
Summary: stand-in base
%description -n nvidia-container-toolkit-base
stand-in

%package -n libnvidia-container-tools
Summary: stand-in tools
Requires: libnvidia-container1(x86-64) >= {version}
%description -n libnvidia-container-tools
stand-in

%package -n libnvidia-container1
Summary: stand-in library
Provides: libnvidia-container1(x86-64) = {version}-1
Requires: glibc >= 2.17
%description -n libnvidia-container1
stand-in

%files
%files -n nvidia-container-toolkit-base
%files -n libnvidia-container-tools
%files -n libnvidia-container1
"""


def build_yum_repo(root: Path, versions: list[str]) -> Path:
    """Build the four stand-in rpms for each version into ``root`` and run createrepo_c there."""
    root.mkdir(parents=True, exist_ok=True)
    top = root.parent / f".{root.name}-rpmbuild"
    for version in versions:
        spec = top / f"toolkit-{version}.spec"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(SPEC.format(version=version))
        subprocess.run(
            [
                "rpmbuild",
                "-bb",
                "--quiet",
                "--define",
                f"_topdir {top}",
                "--define",
                f"_rpmdir {root}",
                "--define",
                "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
                str(spec),
            ],
            check=True,
            capture_output=True,
        )
    subprocess.run(
        ["createrepo_c", "--quiet", "--checksum", "sha512", str(root)], check=True, capture_output=True
    )
    return root
