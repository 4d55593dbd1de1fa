# SPDX-License-Identifier: MIT
"""Shared support of the end-to-end tests of the `eigen-attention` tool.

Every test script is run as

    python3 SCRIPT.py --list                  # the names of its cases, one a line (no NumPy needed)
    python3 SCRIPT.py TOOL CASE               # runs one case against the tool at path TOOL

A case gets a fresh temporary directory, which is the tool's working directory too. It passes
(exit 0), fails (exit 1, with the reason and the failing command on stderr) or is skipped
(exit 77, which CMake registers as SKIP_RETURN_CODE: NumPy missing, or a case that cannot run).

Contents: a registry of cases, a runner for the tool, .npy reading (strict: the header is
checked against the format's specification, not only loaded) and writing (also of deliberately
malformed files), and the checks shared by the scripts.
"""

import ast
import os
import shlex
import struct
import subprocess
import sys
import tempfile
import traceback

SKIP = 77

_CASES = {}


def case(fn):
    """Registers a test case under its function's name."""
    if fn.__name__ in _CASES:
        raise RuntimeError("duplicate case " + fn.__name__)
    _CASES[fn.__name__] = fn
    return fn


class Skip(Exception):
    """Raised by a case that cannot run here; the case exits with SKIP."""


class Failure(AssertionError):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


class Context:
    """What a case gets: the tool's path and its own temporary directory."""

    def __init__(self, tool, directory):
        self.tool = tool
        self.dir = directory
        self.log = []  # every command run, for the failure report

    def path(self, name):
        return os.path.join(self.dir, name)

    def files(self):
        """The names of the files in the case directory, sorted."""
        return sorted(os.listdir(self.dir))

    def run(self, args, timeout=60, cwd=None):
        """Runs the tool with `args` (a list of strings) and returns the CompletedProcess
        (text mode). Never raises for a non-zero exit; a timeout is a failure."""
        # A cross build runs the tool under its emulator (scripts/cross: EA_TOOL_EMULATOR, e.g.
        # "qemu-aarch64 -L /usr/aarch64-linux-gnu"; the log shows the command as run).
        emulator = shlex.split(os.environ.get("EA_TOOL_EMULATOR", ""))
        cmd = emulator + [self.tool] + [str(a) for a in args]
        env = dict(os.environ)
        env["LC_ALL"] = "C"
        self.log.append("cd %s && %s" % (shlex.quote(cwd or self.dir), " ".join(shlex.quote(c) for c in cmd)))
        try:
            return subprocess.run(cmd, cwd=cwd or self.dir, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                                  universal_newlines=True, errors="replace")
        except subprocess.TimeoutExpired:
            raise Failure("timed out after %s s: %s" % (timeout, self.log[-1]))

    def run_ok(self, args, timeout=60, cwd=None):
        """Runs the tool and requires exit status 0 (reporting its stderr otherwise)."""
        r = self.run(args, timeout=timeout, cwd=cwd)
        check(r.returncode == 0, "exit status %d (expected 0)\nstdout: %s\nstderr: %s"
              % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return r


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        for name in _CASES:
            print(name)
        return 0
    if len(argv) != 3:
        sys.stderr.write("usage: %s TOOL CASE | --list\n" % argv[0])
        return 2
    tool, name = os.path.abspath(argv[1]), argv[2]
    if name not in _CASES:
        sys.stderr.write("unknown case %r\n" % name)
        return 2
    try:
        import numpy  # noqa: F401  (Debian's python3-numpy)
    except ImportError:
        sys.stderr.write("SKIP: NumPy is not available to %s\n" % sys.executable)
        return SKIP
    if not os.access(tool, os.X_OK):
        sys.stderr.write("FAIL: the tool %s is not an executable\n" % tool)
        return 1
    with tempfile.TemporaryDirectory(prefix="ea-cli-" + name + "-") as d:
        ctx = Context(tool, d)
        try:
            _CASES[name](ctx)
        except Skip as e:
            sys.stderr.write("SKIP: %s\n" % e)
            return SKIP
        except Failure as e:
            sys.stderr.write("FAIL %s: %s\n" % (name, e))
            if ctx.log:
                sys.stderr.write("last command: %s\n" % ctx.log[-1])
            return 1
        except Exception:
            sys.stderr.write("ERROR in %s:\n%s" % (name, traceback.format_exc()))
            if ctx.log:
                sys.stderr.write("last command: %s\n" % ctx.log[-1])
            return 1
    print("PASS %s (%d tool runs)" % (name, len(ctx.log)))
    return 0


# ---------------------------------------------------------------------------------------------
# .npy files

MAGIC = b"\x93NUMPY"


def npy_bytes(descr, shape, data, fortran=False, version=(1, 0), header=None, header_len=None,
              pad_to=64):
    """The bytes of a .npy file built by hand, so that malformed ones can be made too.
    `shape` is a tuple (written with repr) or a string (written as is); `header`, when given,
    replaces the whole header dict text; `header_len` overrides the length field."""
    if header is None:
        shape_text = shape if isinstance(shape, str) else repr(tuple(shape))
        header = "{'descr': %r, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    text = header.encode("latin1" if version[0] < 3 else "utf8")
    len_size = 2 if version[0] == 1 else 4
    prefix = 6 + 2 + len_size
    total = prefix + len(text) + 1
    text += b" " * ((-total) % pad_to) + b"\n"
    n = len(text) if header_len is None else header_len
    length = struct.pack("<H", n) if len_size == 2 else struct.pack("<I", n)
    return MAGIC + bytes(version) + length + text + data


def write_npy(path, array, version=None):
    """Writes a NumPy array with NumPy's own writer (version None: NumPy's choice)."""
    import numpy as np
    with open(path, "wb") as f:
        # np.ascontiguousarray would turn a 0-D array into shape (1,); keep the rank.
        array = np.asarray(array)
        contiguous = array if array.flags["C_CONTIGUOUS"] else np.ascontiguousarray(array)
        np.lib.format.write_array(f, contiguous, version=version, allow_pickle=False)


def write_raw(path, content):
    with open(path, "wb") as f:
        f.write(content)


def read_npy_strict(path):
    """Reads a .npy file that the tool wrote and checks its form against the format
    specification (magic, version, header dict with exactly the three keys, little-endian or
    byte-order-free descr, C order, the header padded with spaces to a multiple of 64 bytes and
    ended by a newline, exactly as many data bytes as the shape needs); cross-checks the values
    against NumPy's own np.load. Returns (array, descr, header_dict)."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    name = os.path.basename(path)
    check(raw[:6] == MAGIC, "%s: not a .npy file (magic %r)" % (name, raw[:6]))
    major, minor = raw[6], raw[7]
    check((major, minor) in ((1, 0), (2, 0), (3, 0)), "%s: version %d.%d" % (name, major, minor))
    if major == 1:
        (hlen,) = struct.unpack("<H", raw[8:10])
        start = 10
    else:
        (hlen,) = struct.unpack("<I", raw[8:12])
        start = 12
    check(start + hlen <= len(raw), "%s: header longer than the file" % name)
    htext = raw[start:start + hlen].decode("latin1" if major < 3 else "utf8")
    check(htext.endswith("\n"), "%s: header does not end with a newline" % name)
    check((start + hlen) % 64 == 0,
          "%s: header not padded to a multiple of 64 bytes (data starts at %d)" % (name, start + hlen))
    header = ast.literal_eval(htext.strip())
    check(isinstance(header, dict) and set(header) == {"descr", "fortran_order", "shape"},
          "%s: header %r" % (name, htext))
    descr = header["descr"]
    check(header["fortran_order"] is False, "%s: fortran_order is %r" % (name, header["fortran_order"]))
    shape = header["shape"]
    check(isinstance(shape, tuple) and all(isinstance(s, int) and s >= 0 for s in shape),
          "%s: shape %r" % (name, shape))
    dt = np.dtype(descr)
    check(dt.byteorder in ("<", "|") or (dt.byteorder == "=" and sys.byteorder == "little"),
          "%s: descr %r is not little-endian" % (name, descr))
    count = 1
    for s in shape:
        count *= s
    check(len(raw) - start - hlen == count * dt.itemsize,
          "%s: %d data bytes for shape %r of %s (expected %d)"
          % (name, len(raw) - start - hlen, shape, descr, count * dt.itemsize))
    arr = np.frombuffer(raw, dtype=dt, count=count, offset=start + hlen).reshape(shape)
    loaded = np.load(path, allow_pickle=False)
    check(loaded.shape == arr.shape and loaded.dtype == arr.dtype
          and np.array_equal(loaded, arr, equal_nan=True), "%s: np.load disagrees" % name)
    return arr, descr, header


def read_output(path, descr, shape):
    """Reads an output .npy and checks that it has exactly `descr` ('<f4'/'<f8', as NumPy
    writes them) and `shape`."""
    name = os.path.basename(path)
    check(os.path.isfile(path), "%s was not written" % name)
    arr, got_descr, _ = read_npy_strict(path)
    check(got_descr == descr, "%s: dtype %r, expected %r" % (name, got_descr, descr))
    check(arr.shape == tuple(shape), "%s: shape %r, expected %r" % (name, arr.shape, tuple(shape)))
    return arr


# ---------------------------------------------------------------------------------------------
# Errors

ERROR_PREFIX = "eigen-attention: "


def check_one_line_error(r, what, mentions=(), any_of=(), files_any=()):
    """The tool failed as the specification demands: non-zero exit, exactly one line on stderr,
    of the form 'eigen-attention: <file or option>: <problem>'; the line contains every string
    in `mentions`, at least one of `files_any` (the files involved, where the tool may blame
    either) and at least one of `any_of` (the problem: alternatives, as the exact wording is the
    tool's); all case-insensitive."""
    check(r.returncode != 0, "%s: exit status 0, expected a failure\nstdout: %s\nstderr: %s"
          % (what, r.stdout[-1000:], r.stderr[-1000:]))
    check(r.returncode > 0 and r.returncode < 126,
          "%s: exit status %d (a crash or a signal, not an error exit)\nstderr: %s"
          % (what, r.returncode, r.stderr[-2000:]))
    err = r.stderr
    lines = err.splitlines()
    check(len(lines) == 1 and err.endswith("\n"),
          "%s: expected exactly one line on stderr, got %d:\n%s" % (what, len(lines), err[-2000:]))
    line = lines[0]
    check(line.startswith(ERROR_PREFIX) and ": " in line[len(ERROR_PREFIX):]
          and line[len(ERROR_PREFIX):].split(": ", 1)[1].strip() != "",
          "%s: the error %r is not 'eigen-attention: <file or option>: <problem>'" % (what, line))
    low = line.lower()
    for m in mentions:
        check(m.lower() in low, "%s: the error %r does not mention %r" % (what, line, m))
    if files_any:
        check(any(f.lower() in low for f in files_any),
              "%s: the error %r names none of the files %r" % (what, line, list(files_any)))
    if any_of:
        check(any(a.lower() in low for a in any_of),
              "%s: the error %r mentions none of %r" % (what, line, list(any_of)))
    return line


def check_no_new_files(ctx, before, what):
    """Nothing was created in the case directory: no output, no temporary file."""
    after = ctx.files()
    new = sorted(set(after) - set(before))
    check(not new, "%s: files left behind after the failure: %s" % (what, new))
    gone = sorted(set(before) - set(after))
    check(not gone, "%s: input files disappeared: %s" % (what, gone))


def check_only_outputs(ctx, before, outputs, what):
    """After a successful run: exactly the requested outputs were added, nothing else (no
    temporary file left behind)."""
    after = set(ctx.files())
    expected = set(before) | set(os.path.basename(o) for o in outputs)
    check(after == expected, "%s: directory holds %s, expected %s (extra: %s, missing: %s)"
          % (what, sorted(after), sorted(expected), sorted(after - expected), sorted(expected - after)))
