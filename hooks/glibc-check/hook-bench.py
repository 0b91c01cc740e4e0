#!/usr/bin/env python3
"""graft-hook alone, two builds side by side: `nvidia-container` against one root, the two
binaries and /bin/true alternating, N rounds; medians, p90 and the new/old ratio.

    python3 hooks/glibc-check/hook-bench.py OLD_BIN NEW_BIN ROOT FOLDER N

ROOT is a container root whose FOLDER (in-root path, e.g. /usr/local/nvidia/lib64) holds
the libraries; their soname links are passed as --link as graft-driver does. FOLDER
outside the image's system directories makes graft-hook rebuild the cache on every run
(old: the host's /usr/sbin/ldconfig; new: the merge, ldconfig only as the fallback).
Runs as root; writes the params copies under ROOT/../hook-bench-params.
"""
import json, os, statistics, subprocess, sys, time

old, new, root, folder, n = sys.argv[1:6]
n = int(n)
root = os.path.abspath(root)
links = []
libdir = root + folder
for f in sorted(os.listdir(libdir)):
    p = os.path.join(libdir, f)
    if os.path.islink(p) or not os.path.isfile(p):
        continue
    out = subprocess.run(["objdump", "-p", p], capture_output=True, text=True).stdout
    soname = next((l.split()[1] for l in out.splitlines() if "SONAME" in l), None)
    if soname and soname != f:
        links += ["--link", f"{f}::{folder}/{soname}"]
state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1,
                    "bundle": "", "root": root}).encode()
params = os.path.join(os.path.dirname(root), "hook-bench-params", "p")
args = ["nvidia-container", *links, "--folder", folder, "--ldconfig", "/usr/sbin/ldconfig",
        "--params-copy", params, "--driver-version", "580.95.05"]


def run(binary):
    t = time.perf_counter()
    p = subprocess.run([binary, *args] if binary != "/bin/true" else [binary],
                       input=state, capture_output=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{binary}: {p.stderr.decode()}")
    return dt


bins = {"old": old, "new": new, "true": "/bin/true"}
for b in bins.values():
    run(b)
res = {k: [] for k in bins}
for _ in range(n):
    for k, b in bins.items():
        res[k].append(run(b))
for k, v in res.items():
    v.sort()
    print(f"{k:5} p50 {statistics.median(v)*1e3:7.3f} ms  p90 {v[int(len(v)*0.9)]*1e3:7.3f} ms")
o, w, t = (statistics.median(res[k]) for k in ("old", "new", "true"))
print(f"new/old p50 {w/o:.3f}; less /bin/true: old {(o-t)*1e3:.3f} ms, new {(w-t)*1e3:.3f} ms, "
      f"ratio {(w-t)/(o-t):.3f}")
