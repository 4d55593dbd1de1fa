#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One version everywhere a user or a packager reads it: include/EigenAttention/Version.hpp (where
it is set), the CMake project, the CMake package (EigenAttentionConfigVersion.cmake), the Debian
packages (CPackConfig.cmake's CPACK_PACKAGE_VERSION, and CPACK_DEBIAN_PACKAGE_VERSION if set: the
.deb's Version field, which test/package/deb.sh reads back from the built .deb), the pkg-config
file, and the top entry of CHANGELOG.md (its first "## [x.y.z]" heading; an "[Unreleased]"
heading above it is passed over).

    python3 test/version.py <repository root> <build tree> <PROJECT_VERSION>
"""
import os
import re
import sys


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def header_version(root):
    text = read(os.path.join(root, "include", "EigenAttention", "Version.hpp"))
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define EIGEN_ATTENTION_VERSION_%s (\d+)$" % part, text, re.M)
        if not m:
            return None
        parts.append(m.group(1))
    return ".".join(parts)


def cmake_set(path, name):
    """The value of set(NAME "value") in a generated CMake file; None when it is not set."""
    m = re.search(r'^\s*set\(%s "([^"]*)"\)' % re.escape(name), read(path), re.M)
    return m.group(1) if m else None


def pc_version(path):
    m = re.search(r"^Version:\s*(\S+)\s*$", read(path), re.M)
    return m.group(1) if m else None


def changelog_version(root):
    for line in read(os.path.join(root, "CHANGELOG.md")).splitlines():
        m = re.match(r"^## \[([^\]]+)\]", line)
        if m and m.group(1).lower() != "unreleased":
            return m.group(1)
    return None


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    root, build, project_version = argv[1:]
    found = [
        ("include/EigenAttention/Version.hpp", header_version(root)),
        ("the CMake project (PROJECT_VERSION)", project_version),
        ("the CMake package (EigenAttentionConfigVersion.cmake's PACKAGE_VERSION)",
         cmake_set(os.path.join(build, "EigenAttentionConfigVersion.cmake"), "PACKAGE_VERSION")),
        ("the .deb packages (CPackConfig.cmake's CPACK_PACKAGE_VERSION)",
         cmake_set(os.path.join(build, "CPackConfig.cmake"), "CPACK_PACKAGE_VERSION")),
        ("the pkg-config file (eigen-attention.pc's Version)", pc_version(os.path.join(build, "eigen-attention.pc"))),
        ("CHANGELOG.md's top entry (## [x.y.z])", changelog_version(root)),
    ]
    debian = cmake_set(os.path.join(build, "CPackConfig.cmake"), "CPACK_DEBIAN_PACKAGE_VERSION")
    if debian is not None:
        found.append(("the .deb packages (CPACK_DEBIAN_PACKAGE_VERSION)", debian))
    want = found[0][1]
    width = max(len(what) for what, _ in found)
    for what, version in found:
        print("%-*s  %s" % (width, what, version if version is not None else "(not found)"))
    if want is None or any(version != want for _, version in found):
        print("The versions disagree: each must be %s, the version of include/EigenAttention/Version.hpp" % want)
        return 1
    print("One version everywhere: %s" % want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
