#!/usr/bin/env python3
"""Build and check wimm's man pages (scdoc sources in man/).

    pages.py build SRC_DIR OUT_DIR        scdoc every *.N.scd into OUT_DIR/manN/,
                                          and a symlink for every other name of its
                                          NAME line
    pages.py coverage SRC_DIR HEADER...   every function and type of the headers has
                                          a page (is named in a NAME line), and no
                                          page names a function the headers lack
    pages.py render OUT_DIR               every built page and link renders with
                                          man -l, without a groff warning

The header is parsed generically (comments and macros stripped, then every
"wimm_name(" is a function, and every "struct/enum/union wimm_name {" or
"struct wimm_name;" and every typedef'd wimm_name a type), so a new function in include/wimm.h needs only
its name in some page's NAME line and its description there.
"""

import os
import re
import subprocess
import sys

IDENT = r"wimm_[a-z0-9_]+"


def sources(src_dir):
    for name in sorted(os.listdir(src_dir)):
        m = re.fullmatch(r"(.+)\.([1-8])\.scd", name)
        if m:
            yield os.path.join(src_dir, name), m.group(1), m.group(2)


def names_of(path):
    """The names of a page's NAME section: "a, b, c - what they do"."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^# NAME\s*\n\s*\n(.+?) - ", text, re.M)
    if not m:
        raise SystemExit(f"{path}: no NAME section of the form 'name, ... - description'")
    return [n.strip() for n in m.group(1).split(",")], text


def build(src_dir, out_dir):
    for path, page, section in sources(src_dir):
        mandir = os.path.join(out_dir, f"man{section}")
        os.makedirs(mandir, exist_ok=True)
        target = os.path.join(mandir, f"{page}.{section}")
        with open(path, "rb") as src, open(target, "wb") as out:
            r = subprocess.run(["scdoc"], stdin=src, stdout=out, stderr=subprocess.PIPE)
        if r.returncode != 0:
            os.unlink(target)
            raise SystemExit(f"{path}: scdoc: {r.stderr.decode().strip()}")
        names, _ = names_of(path)
        for name in names:
            if name != page:
                # A relative symlink: man -l resolves it from any directory
                # (a ".so" line only from the hierarchy's root), and man-db
                # follows it where the pages are installed.
                link = os.path.join(mandir, f"{name}.{section}")
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink(f"{page}.{section}", link)


def header_api(header):
    with open(header, encoding="utf-8") as f:
        text = f.read()
    code = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    code = re.sub(r"//[^\n]*", " ", code)
    code = re.sub(r"^\s*#.*?(?<!\\)$", " ", code, flags=re.M | re.S)  # macros
    functions = set(re.findall(rf"\b({IDENT})\s*\(", code))
    types = set(re.findall(rf"\b(?:struct|enum|union)\s+({IDENT})\s*[{{;]", code))
    # typedefs: of a function pointer, "typedef void (*wimm_log_fn)(...)",
    # and of anything else, "typedef ... wimm_x;"
    types |= set(re.findall(rf"\btypedef[^;]*?\(\s*\*\s*({IDENT})\s*\)", code))
    types |= set(re.findall(rf"\btypedef[^;(]*?\b({IDENT})\s*;", code))
    return functions, types


def coverage(src_dir, headers):
    functions, types = set(), set()
    for header in headers:
        f, t = header_api(header)
        if not f:
            raise SystemExit(f"{header}: found no functions (is the parser still right?)")
        functions |= f
        types |= t
    header = " or ".join(os.path.basename(h) for h in headers)
    named = {}
    problems = []
    for path, page, section in sources(src_dir):
        names, text = names_of(path)
        for name in names:
            if (name, section) in named:
                problems.append(f"{name}({section}) is named by {named[name, section]} and"
                                f" {page}({section})")
            named[name, section] = f"{page}({section})"
            if section == "3" and name not in functions | types:
                problems.append(f"{page}({section}) names {name}, which {header} does not"
                                " declare")
        if section == "3" and page not in names:
            problems.append(f"{page}({section}): its own name is missing from its NAME line")
        # A call anywhere in the page must be one the header declares.
        for called in sorted(set(re.findall(rf"\b({IDENT})\*?\s*\(", text))):
            if called not in functions:
                problems.append(f"{page}({section}) shows {called}(), which {header} does"
                                " not declare")
    in_section3 = {name for name, section in named if section == "3"}
    for kind, wanted in (("function", functions), ("type", types)):
        for name in sorted(wanted - in_section3):
            problems.append(f"{kind} {name} of {header} has no man page: add it to the NAME"
                            " line of a page in man/ and describe it there")
    for p in problems:
        print(f"not ok - {p}")
    print(f"{len(functions)} functions, {len(types)} types, {len(named)} page names")
    return 1 if problems else 0


def render(out_dir):
    failed = 0
    pages = sorted(os.path.join(d, f) for d, _, fs in os.walk(out_dir) for f in fs
                   if re.fullmatch(r".+\.[1-8]", f))
    if not pages:
        raise SystemExit(f"{out_dir}: no pages built")
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    for page in pages:
        # From another directory: every name must resolve with man -l as it is.
        r = subprocess.run(["man", "--warnings=w", "-l", os.path.abspath(page)], cwd="/",
                           env=env, capture_output=True, text=True)
        bad = r.returncode != 0 or r.stderr.strip() or "NAME" not in r.stdout
        if bad:
            failed += 1
            print(f"not ok - {page}: exit {r.returncode}; {r.stderr.strip()[:500]}")
    print(f"{len(pages) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "build":
        build(argv[2], argv[3])
        return 0
    if len(argv) >= 4 and argv[1] == "coverage":
        return coverage(argv[2], argv[3:])
    if len(argv) == 3 and argv[1] == "render":
        return render(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
