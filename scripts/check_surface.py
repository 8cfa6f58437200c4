#!/usr/bin/env python3
"""Holds a crate's public surface to its budget, from rustdoc's item list.

    check_surface.py target/doc/tensorfile/all.html --max-items 250

Reads `all.html` (every public item of the crate, as docs.rs lists it) and
fails when there are more than --max-items items, when two public items
share a name (an item re-exported at a second path counts twice, as on
docs.rs), or when more than one item is named `Error`. Prints the counts
and every offending name.
"""
import argparse
import collections
import re
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("all_html", help="rustdoc's all.html of the crate")
    ap.add_argument("--max-items", type=int, required=True)
    args = ap.parse_args()
    text = open(args.all_html, encoding="utf-8").read()
    # Each item is `<li><a href="path/kind.Name.html">path::Name</a></li>`.
    items = re.findall(r'<li><a href="([^"]+)">([^<]+)</a></li>', text)
    if not items:
        print(f"{args.all_html}: no items found (not rustdoc's all.html?)", file=sys.stderr)
        return 1
    names = collections.Counter(path.rsplit("::", 1)[-1] for _, path in items)
    shared = sorted(n for n, c in names.items() if c > 1)
    ok = True
    print(f"{len(items)} public items (budget {args.max_items}), "
          f"{names['Error']} named Error, {len(shared)} names used twice or more")
    if len(items) > args.max_items:
        ok = False
        print(f"over budget by {len(items) - args.max_items}", file=sys.stderr)
    if shared:
        ok = False
        for name in shared:
            paths = [p for _, p in items if p.rsplit("::", 1)[-1] == name]
            print(f"name used {len(paths)} times: {', '.join(paths)}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
