#!/usr/bin/env bash
# check_layers.sh: fails when a source file includes one that is not below it in the layer order
# written in cmake/layers.txt (layers: core < aio, cpu_adam < offload < ...; the rooms inside a
# layer, as aio's, engine's, models', nn's, offload's and tokenizers', and rooms inside a room, as
# engine/config's or models/llama's). Prints one line per offending include: file:line, the
# include, and both rooms.
#
#   scripts/check_layers.sh [--root DIR] [--layers FILE]
#   (defaults: this checkout, its cmake/layers.txt)
#
# Exit codes: 0 every include goes downwards or stays in its room; 1 some do not (listed);
# 64 bad usage or a malformed layers file. Run by ctest as `layer_includes` (scripts/test.sh, CI).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
layers=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    --layers) layers=${2:?--layers needs a file}; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "check_layers: unknown argument '$1' (allowed: --root DIR, --layers FILE)" >&2
       exit 64 ;;
  esac
done
layers=${layers:-$root/cmake/layers.txt}
python=/usr/bin/python3
[[ -x $python ]] || python=python3
exec "$python" - "$root" "$layers" <<'PY'
import os, re, sys

root, layers_file = sys.argv[1], sys.argv[2]

def fail_usage(msg):
    print(f"check_layers: {msg}", file=sys.stderr)
    sys.exit(64)

# scope -> {room name -> (level index, room id)}
scopes = {}
try:
    lines = open(layers_file).read().splitlines()
except OSError as e:
    fail_usage(f"cannot read {layers_file}: {e.strerror}")
for n, line in enumerate(lines, 1):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    if ":" not in line:
        fail_usage(f"{layers_file}:{n}: expected '<scope>: <level> < <level> ...'")
    scope, order = (s.strip() for s in line.split(":", 1))
    if scope in scopes:
        fail_usage(f"{layers_file}:{n}: scope '{scope}' is ordered twice")
    rooms = {}
    for level, names in enumerate(order.split("<")):
        names = names.split()
        if not names:
            fail_usage(f"{layers_file}:{n}: an empty level in '{order}'")
        for group in names:
            for name in group.split("+"):
                if name in rooms:
                    fail_usage(f"{layers_file}:{n}: '{name}' appears twice")
                rooms[name] = (level, group)
    scopes[scope] = rooms
if "." not in scopes:
    fail_usage(f"{layers_file}: no '.' line (the order of the layers)")
top = scopes["."]
layers_file_rel = os.path.relpath(layers_file, root) if layers_file.startswith(root) else layers_file

def place(path):
    """(layer, layer level, rooms) of a repository path, or None if not in a layer. rooms is one
    (scope, room, level) per scope the path is in: the layer's, then its room's if that room is
    ordered too (`engine/config: reader < ...`), and so on down."""
    parts = path.split("/")
    if len(parts) < 2 or parts[0] not in top:
        return None
    layer = parts[0]
    level, _ = top[layer]
    rooms = []
    scope, rest = layer, parts[1:]
    while scope in scopes:
        inner = scopes[scope]
        sub = rest[0] if len(rest) > 1 and rest[0] in inner else "."
        if sub == "." and "." not in inner:  # no root room named: the scope's root is on top
            rooms.append((scope, ".", max(lv for lv, _ in inner.values()) + 1))
            break
        room_level, room = inner[sub]
        rooms.append((scope, room, room_level))
        if sub == ".":
            break
        scope, rest = f"{scope}/{sub}", rest[1:]
    return layer, level, rooms

def name(scope, room):
    return scope if room == "." else f"{scope}/{room}"

include_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
bad = []
checked = 0
for dirpath, dirnames, filenames in os.walk(root):
    rel_dir = os.path.relpath(dirpath, root)
    if rel_dir == ".":
        dirnames[:] = [d for d in dirnames if d in top]
    dirnames.sort()
    for f in sorted(filenames):
        if not f.endswith((".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".inc")):
            continue
        rel = os.path.normpath(os.path.join(rel_dir, f))
        me = place(rel)
        if me is None:
            continue
        checked += 1
        with open(os.path.join(root, rel), errors="replace") as src:
            for n, line in enumerate(src, 1):
                m = include_re.match(line)
                if not m:
                    continue
                inc = m.group(1)
                it = place(inc)
                if it is None:
                    continue
                (ml, mlv, mrooms), (il, ilv, irooms) = me, it
                if il == ml:
                    # The first scope where the two rooms differ orders them.
                    why = None
                    for (sc, mr, mrv), (_, ir, irv) in zip(mrooms, irooms):
                        if ir == mr:
                            continue
                        if irv >= mrv:
                            why = (f"room {name(sc, ir)} is not below room {name(sc, mr)} "
                                   f"({layers_file_rel}: {sc})")
                        break
                    if why is None:
                        continue
                elif ilv < mlv:
                    continue
                else:
                    why = f"layer {il} is not below layer {ml} ({layers_file_rel}: .)"
                bad.append(f"{rel}:{n}: includes \"{inc}\": {why}")

for b in bad:
    print(b)
if bad:
    print(f"check_layers: {len(bad)} include(s) go up or sideways in the layer order "
          f"({layers_file_rel}); move the code down or the include up", file=sys.stderr)
    sys.exit(1)
print(f"check_layers: {checked} files, every include goes down the layer order ({layers_file_rel})")
PY
