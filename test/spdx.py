#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every source, header, script and build file of the repository says its license (LICENSE, MIT)
in an SPDX line at its top, as docs/dependencies.md describes:

    C and C++ (.cpp .hpp .h .cc, and their .in templates)   // SPDX-License-Identifier: MIT
    CMake (CMakeLists.txt .cmake .cmake.in), Python (.py), shell (.sh), pkg-config (.pc.in),
    Doxyfile.in, and any other file that starts with #!       # SPDX-License-Identifier: MIT
    the linker version script (.map.in)                       /* SPDX-License-Identifier: MIT */

on the first line, or on the second after a #! line. Data (test/data's .npy, the fuzz corpus,
bench/results), documentation (.md) and the tools' settings (.clang-format, .gitignore) are not
checked. The files are those git tracks, or, outside a git checkout, every file under the root but
build trees (directories with a CMakeCache.txt) and .git.

    python3 test/spdx.py <repository root>
"""
import os
import subprocess
import sys

TAG = "SPDX-License-Identifier: MIT"
HASH = "# " + TAG
SLASHES = "// " + TAG
BLOCK = "/* " + TAG + " */"


def expected_line(path, first_line):
    """The SPDX line a file must have, or None if it is not a kind that has one."""
    name = os.path.basename(path)
    if name.endswith((".cpp", ".hpp", ".h", ".cc", ".cpp.in", ".hpp.in")):
        return SLASHES
    if name == "CMakeLists.txt" or name == "Doxyfile.in" or name.endswith(
            (".cmake", ".cmake.in", ".py", ".sh", ".pc.in")):
        return HASH
    if name.endswith(".map.in"):
        return BLOCK
    if first_line.startswith(b"#!"):  # a script without an extension (scripts/test, .ci/run)
        return HASH
    return None


def listed_files(root):
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, check=True).stdout
        files = [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"
                   and not os.path.exists(os.path.join(top, d, "CMakeCache.txt"))]
        files += [os.path.relpath(os.path.join(top, n), root) for n in names]
    return files


def missing(root, files):
    bad = []
    for rel in sorted(files):
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue  # a deleted file not yet committed, or a link
        with open(path, "rb") as f:
            head = f.read(4096).split(b"\n")
        want = expected_line(rel, head[0])
        if want is None:
            continue
        line = head[1] if head[0].startswith(b"#!") and len(head) > 1 else head[0]
        if line.rstrip(b"\r").decode("utf-8", "replace") != want:
            bad.append((rel, want))
    return bad


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    root = argv[1]
    files = listed_files(root)
    bad = missing(root, files)
    if bad:
        print("%d file%s without the SPDX line at the top (first line, or second after #!):" %
              (len(bad), "" if len(bad) == 1 else "s"))
        for rel, want in bad:
            print("  %s: %s" % (rel, want))
        return 1
    print("%d files checked, every one with its SPDX line (%s)" % (len(files), TAG))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
