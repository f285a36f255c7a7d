#!/usr/bin/env bash
# A real one-node Slurm cluster (scripts/slurm_local.sh: Debian's slurm-wlm and munge, slurmctld
# and slurmd on loopback) runs a 4-point sweep of tiny models submitted with `gengraph submit`;
# `gengraph collect` must give what a local `gengraph run` of the same file gives (schema, points,
# tokens). Then a point's part is removed: collect exits 3 naming it, `submit --rerun` runs only it
# again, and collect succeeds. If the daemons cannot start, this says why and fails.
# Usage: check_slurm.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD="$(cd "$1" && pwd)"; SRC="$(cd "$2" && pwd)"
W="$BUILD/slurm_check"
STATE="$W/cluster"
rm -rf "$W"; mkdir -p "$W"
GG="$BUILD/gengraph"
say() { echo "[check_slurm] $*"; }

if ! start_out=$("$SRC/scripts/slurm_local.sh" start "$STATE"); then
  echo "[check_slurm] the one-node Slurm cluster did not start (slurm_local.sh's reasons above)" >&2
  exit 1
fi
export "$(echo "$start_out" | tail -n1)"   # SLURM_CONF=...
trap '"$SRC/scripts/slurm_local.sh" stop "$STATE" >/dev/null 2>&1 || true' EXIT
say "cluster up: $(sinfo -h -o '%N %t %c CPUs')"

cp "$SRC/configs/slurm_sweep_tiny.yaml" "$W/sweep.yaml"

wait_for() {  # until job $1 has left the queue (bounded)
  for _ in $(seq 1 240); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 1
  done
  echo "[check_slurm] job $1 still queued after 240 s:" >&2; squeue -a >&2; exit 1
}
job_id() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][-1]["job_id"])' "$W/job/job.json"; }

cd "$W"
"$GG" submit sweep.yaml --job-dir "$W/job"
id=$(job_id); wait_for "$id"
say "job $id done: $(cat "$STATE/jobcomp.log" | grep -c 'JobState=COMPLETED') task(s) COMPLETED"
"$GG" collect "$W/job" --output "$W/merged.json" >/dev/null
"$GG" run sweep.yaml --output "$W/local.json" --quiet >/dev/null

python3 - "$W/merged.json" "$W/local.json" <<'PY'
import json, sys
merged, local = (json.load(open(p)) for p in sys.argv[1:3])
assert set(merged) == set(local), (sorted(merged), sorted(local))
for k in local:
    if k not in ("created", "points"):
        assert merged[k] == local[k], k
assert [p["point"] for p in merged["points"]] == [p["point"] for p in local["points"]]
def tokens(p):
    return [[[s["tokens"] for s in i["sequences"]] for i in r["outputs"]] for r in p["runs"]]
for m, l in zip(merged["points"], local["points"]):
    assert set(m) == set(l), (sorted(m), sorted(l))
    assert tokens(m) == tokens(l), m["point"]
print(f"[check_slurm] merged == local run: {len(local['points'])} points, same schema and tokens")
PY

rm "$W/job/parts/2.json"
set +e; "$GG" collect "$W/job" --output "$W/partial.json" >/dev/null 2>"$W/partial.err"; rc=$?; set -e
[ "$rc" -eq 3 ] || { echo "[check_slurm] collect of a partial array exited $rc, expected 3" >&2; cat "$W/partial.err" >&2; exit 1; }
grep -q "point 2 \[generation.num_beams=2, generation.max_new_tokens=2\]: no result" "$W/partial.err" || { cat "$W/partial.err" >&2; exit 1; }
say "partial array: exit 3, naming point 2"
"$GG" submit --rerun "$W/job"
id=$(job_id); wait_for "$id"
"$GG" collect "$W/job" --output "$W/merged.json" >/dev/null
say "rerun of the missing point (job $id): collect exits 0"
