#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The one grammar of the public calls (docs/api.md), checked on the headers themselves.

Every function declared in include/EigenAttention/ (but the 0.2 forms kept as they were for one
minor version: Deprecated.hpp and the [[deprecated]] forwarders; detail/ included: what crosses into the
compiled library follows it too) that takes `const Options&` must take after it nothing but
`const Masks<...>&`, for the backward calls `const BackwardTerms<...>&` (dL/dLSE in, dL/dsinks
out) and, for the MPI calls, the distributed configuration (`const Config&`).
Calls not yet moved to the grammar are listed in PENDING, by header and name, each with the
argument that breaks it; the check fails on any other violation, and on a PENDING entry that no
longer breaks it (so that the list only shrinks).

    python3 test/grammar.py <repository root>
"""
import os
import re
import sys

# (header, function): the parameter after Options that is still there. Empty: every call keeps
# the grammar (a call that breaks it later is listed here with the issue that moves it).
PENDING = {}

ALLOWED_AFTER = re.compile(
    r"^const\s+(?:\w+::)*(?:Masks<.*>|BackwardTerms<.*>|Config|NoDeduce<(?:Masks|BackwardTerms)<.*>>)\s*&")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def split_params(text, start):
    """Parameters of the list whose '(' is at text[start - 1]; None if unbalanced."""
    depth, angle, cur, params = 0, 0, start, []
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                params.append(text[cur:i].strip())
                return params
            depth -= 1
        elif c == "<":
            angle += 1
        elif c == ">" and angle > 0:
            angle -= 1
        elif c == "," and depth == 0 and angle == 0:
            params.append(text[cur:i].strip())
            cur = i + 1
    return None


def macro_free(text):
    """Declarations written through a macro (detail/AbiMultiHead.hpp): the macro body, once."""
    return text.replace("\\\n", "\n")


def check(root, quiet=False):
    include = os.path.join(root, "include", "EigenAttention")
    violations = {}
    declared = 0
    for folder, _, files in os.walk(include):
        for name in sorted(files):
            if not name.endswith(".hpp") or name == "Deprecated.hpp":  # the 0.2 forms, kept as they were
                continue
            text = strip_comments(macro_free(open(os.path.join(folder, name)).read()))
            for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text):
                fn = m.group(1)
                if fn in ("if", "for", "while", "switch", "return", "sizeof", "decltype", "static_assert",
                          "alignof", "noexcept", "throw"):
                    continue
                params = split_params(text, m.end())
                if not params or not any(re.match(r"^const\s+Options\s*&", p) for p in params):
                    continue
                # A declaration or definition: the parameters have types (a call's arguments do not).
                if not all(re.search(r"[\w>&*]\s+[&*]*\w+(\s*=.*)?$|^const\s+Options\s*&$", p) for p in params):
                    continue
                # The 0.2 forms kept for one minor version ([[deprecated]] forwarders) keep 0.2's order.
                head = text[max(text.rfind(";", 0, m.start()), text.rfind("}", 0, m.start())) + 1:m.start()]
                if "[[deprecated" in head:
                    continue
                declared += 1
                at = next(i for i, p in enumerate(params) if re.match(r"^const\s+Options\s*&", p))
                for p in params[at + 1:]:
                    if not ALLOWED_AFTER.match(p):
                        arg = re.sub(r"\s*=.*$", "", p).split()[-1].lstrip("&*")
                        violations.setdefault((os.path.relpath(os.path.join(folder, name), include), fn), set()).add(arg)
    failures = []
    for key, args in sorted(violations.items()):
        header = os.path.basename(key[0])
        if PENDING.get((header, key[1])) in args and len(args) == 1:
            continue
        failures.append("%s: %s takes %s after Options (only Masks, BackwardTerms, and the MPI configuration, may follow it)"
                        % (key[0], key[1], ", ".join(sorted(args))))
    seen = {(os.path.basename(h), f) for h, f in violations}
    for key in sorted(PENDING):
        if key not in seen:
            failures.append("%s: %s keeps the grammar now: remove it from PENDING in test/grammar.py" % key)
    if quiet:
        return failures
    print("%d declarations taking Options checked; %d pending%s"
          % (declared, len(PENDING), "".join(" " + f for _, f in sorted(PENDING))))
    for f in failures:
        print("error: " + f)
    return 1 if failures or declared == 0 else 0


def self_test():
    """The check fails on a planted violation and passes a deprecated 0.2 form."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        include = os.path.join(root, "include", "EigenAttention")
        os.makedirs(include)
        with open(os.path.join(include, "Planted.hpp"), "w") as f:
            f.write("void good(HeadsView<float> q, HeadsView<float> attn, const Options& opt = {},\n"
                    "          const Masks<float>& masks = {}, const Config& config = {});\n"
                    "void bad(HeadsView<float> q, HeadsView<float> attn, const Options& opt = {},\n"
                    "         HeadsView<float> lse = {});\n"
                    "[[deprecated(\"old\")]] void old(HeadsView<float> q, const Options& opt, float* x);\n")
        failures = check(root, quiet=True)
        global PENDING
        expected = [f for f in failures if "bad takes lse after Options" in f]
        extra = [f for f in failures if f not in expected and "PENDING" not in f]
        if len(expected) != 1 or extra:
            print("error: self-test: the planted violation gave %s" % failures)
            return 1
    return 0


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    sys.exit(self_test() or check(root))
