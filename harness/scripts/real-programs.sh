#!/usr/bin/env bash
# Real programs on slub-core's malloc (issue 18): each program runs without
# a preloaded allocator (glibc), with libkmm_malloc.so on both fronts, and
# with the Debian allocators that are installed; its output must be
# identical to glibc's and it must exit 0. Prints wall time and peak RSS
# (/usr/bin/time -v), medians over the runs.
#
#   harness/scripts/real-programs.sh [--quick] [--runs N] [--lib PATH] [--json FILE]
#
# --quick: small inputs, 1 run, only glibc and our two fronts (the CI smoke).
# --install: apt-get install the programs that are missing (when root).
# Needs python3, sqlite3, gzip, xz, sort, git and /usr/bin/time (Debian
# packages python3 sqlite3 gzip xz-utils coreutils git time).
set -euo pipefail

quick=0
install=0
runs=3
lib=""
json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; runs=1 ;;
    --install) install=1 ;;
    --runs) runs="$2"; shift ;;
    --lib) lib="$2"; shift ;;
    --json) json="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
root="$(cd "$(dirname "$0")/../.." && pwd)"
[ -n "$lib" ] || lib="$root/target/release/libkmm_malloc.so"
[ -f "$lib" ] || { echo "no $lib: cargo build --release -p kmm-malloc" >&2; exit 2; }
need_pkgs() {
  local miss=""
  command -v python3 >/dev/null || miss="$miss python3"
  command -v sqlite3 >/dev/null || miss="$miss sqlite3"
  command -v xz >/dev/null || miss="$miss xz-utils"
  command -v git >/dev/null || miss="$miss git"
  [ -x /usr/bin/time ] || miss="$miss time"
  echo "$miss"
}
miss="$(need_pkgs)"
if [ -n "$miss" ] && [ $install = 1 ] && [ "$(id -u)" = 0 ]; then
  echo "==> installing:$miss" >&2
  apt-get update -qq && apt-get install -y -qq $miss >/dev/null
  miss="$(need_pkgs)"
fi
[ -z "$miss" ] || { echo "missing:$miss (apt-get install -y$miss)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ $quick = 1 ]; then scale=1; else scale=10; fi

# ---- inputs -----------------------------------------------------------
cat > "$work/alloc.py" <<'PY'
# Allocation-heavy and multi-threaded: dicts, lists, strings, tuples built
# and dropped by 4 threads, objects handed between threads via a queue.
import sys, threading, queue, hashlib
scale = int(sys.argv[1])
q = queue.Queue()
results = [None] * 4
def work(t):
    d = {}
    acc = hashlib.sha256()
    for i in range(20000 * scale):
        k = "k%d-%d" % (t, i % 5000)
        d[k] = [i, str(i) * (i % 7), (t, i)]
        if i % 3 == 0:
            q.put({"n": i, "s": "x" * (i % 300)})
        if i % 1000 == 0:
            acc.update(repr(sorted(d.items())[:50]).encode())
            d = {kk: v for kk, v in d.items() if hash(kk) % 2}
    results[t] = acc.hexdigest()
def drain():
    got = 0
    while True:
        x = q.get()
        if x is None:
            break
        got += len(x["s"])
    results.append(got)
ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
dr = threading.Thread(target=drain)
dr.start(); [t.start() for t in ts]; [t.join() for t in ts]
q.put(None); dr.join()
print("\n".join(map(str, results)))
PY
python3 - "$work/q.sql" "$scale" <<'PY'
import sys
n = 2000 * int(sys.argv[2])
with open(sys.argv[1], "w") as f:
    f.write("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL, tag TEXT);\n")
    f.write("CREATE INDEX ti ON t(tag);\nBEGIN;\n")
    for i in range(n):
        f.write("INSERT INTO t(name, v, tag) VALUES ('name%d', %d.5, 'tag%d');\n" % (i, i * 7 % 1000, i % 37))
    f.write("COMMIT;\n")
    for i in range(200):
        f.write("SELECT tag, count(*), sum(v) FROM t WHERE tag = 'tag%d' GROUP BY tag;\n" % (i % 37))
    f.write("SELECT count(*), max(v) FROM t WHERE name LIKE 'name1%';\n")
    f.write("SELECT name FROM t ORDER BY v DESC, id LIMIT 20;\n")
PY
python3 -c "
import random, sys
r = random.Random(18)
with open(sys.argv[1], 'w') as f:
    for i in range(50000 * int(sys.argv[2])):
        f.write('%08x %s line %d\n' % (r.getrandbits(32), 'abcdefgh'[i % 8] * (i % 20), i))
" "$work/data.txt" "$scale"

cat > "$work/git.sh" <<'SH'
set -e
export GIT_AUTHOR_NAME=kmm GIT_AUTHOR_EMAIL=kmm@example.invalid
export GIT_COMMITTER_NAME=kmm GIT_COMMITTER_EMAIL=kmm@example.invalid
export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
export HOME="$2" GIT_CONFIG_NOSYSTEM=1
d="$2/repo"; rm -rf "$d"; mkdir -p "$d"; cd "$d"
git init -q -b main .
for c in $(seq 1 $((10 * $1))); do
  for f in $(seq 1 20); do echo "commit $c file $f $(seq 1 $((c % 30)))" > "f$f.txt"; done
  git add -A; git commit -q -m "commit $c"
done
git log --format='%H %s' | head -5
git gc -q
git log --stat | sha256sum
git diff HEAD~5 --stat | tail -1
git status --short | wc -l
SH

# ---- programs: name, then the command (output on stdout) ---------------
prog_cmd() {
  case "$1" in
    python)  echo "env PYTHONHASHSEED=0 python3 $work/alloc.py $scale" ;;
    sqlite)  echo "bash -c 'rm -f $work/t.db; sqlite3 $work/t.db < $work/q.sql'" ;;
    gzip)    echo "bash -c 'gzip -c $work/data.txt | gzip -dc | sha256sum'" ;;
    xz)      echo "bash -c 'xz -T2 -4 -c $work/data.txt | xz -dc | sha256sum'" ;;
    sort)    echo "bash -c 'sort -S 64M $work/data.txt | sha256sum'" ;;
    git)     echo "bash $work/git.sh $scale $work/gitwork" ;;
  esac
}
programs="python sqlite gzip xz sort git"

# ---- allocators: name=preload ("" for glibc) ---------------------------
allocs=("glibc=" "slub-tid=$lib" "slub-sheaves=$lib")
if [ $quick = 0 ]; then
  for cand in "jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2" \
              "tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4" \
              "mimalloc=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"; do
    [ -f "${cand#*=}" ] && allocs+=("$cand")
  done
fi

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
fail=0
rows=()
printf '%-8s %-13s %9s %11s %s\n' program allocator wall_s peak_rss_kb output
for p in $programs; do
  cmd="$(prog_cmd "$p")"
  ref=""
  for a in "${allocs[@]}"; do
    name="${a%%=*}"; pre="${a#*=}"
    front=tid; [ "$name" = slub-sheaves ] && front=sheaves
    walls=(); rsss=(); same=yes
    for r in $(seq 1 "$runs"); do
      set +e
      env ${pre:+LD_PRELOAD=$pre} KMM_SLUB_FRONT=$front /usr/bin/time -v -o "$work/time" \
        bash -c "$cmd" > "$work/out" 2> "$work/err"
      rc=$?
      set -e
      if [ $rc != 0 ]; then
        same="CRASH(rc=$rc)"; fail=1
        sed 's/^/    /' "$work/err" | tail -5 >&2
        continue
      fi
      sum="$(sha256sum < "$work/out" | cut -c1-16)"
      if [ "$name" = glibc ] && [ -z "$ref" ]; then ref="$sum"; fi
      if [ "$sum" != "$ref" ]; then same="DIFFERS"; fail=1; fi
      walls+=("$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' "$work/time")")
      rsss+=("$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time")")
    done
    w="$(printf '%s\n' "${walls[@]:-0}" | median)"
    m="$(printf '%s\n' "${rsss[@]:-0}" | median)"
    [ "$same" = yes ] && [ "$name" = glibc ] && same="reference"
    printf '%-8s %-13s %9s %11s %s\n' "$p" "$name" "$w" "$m" "$same"
    rows+=("{\"program\":\"$p\",\"allocator\":\"$name\",\"wall_s\":$w,\"peak_rss_kb\":$m,\"output\":\"$same\",\"runs\":$runs}")
  done
done
if [ -n "$json" ]; then
  (IFS=,; echo "[${rows[*]}]") > "$json"
fi
exit $fail
