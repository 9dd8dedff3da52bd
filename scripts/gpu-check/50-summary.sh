# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): summary.json and rows.md (scripts/gpu-check/summary.py)
# and the logs compressed to come back.
# ---- 6. summary.json -----------------------------------------------------------------------------
python3 "$repo/scripts/gpu-check/summary.py" "$results" "$bdir" "$OUT" "$cuda_on" "$(git rev-parse HEAD 2>/dev/null)"
rm -f "$results"; rm -rf "$bdir"
# summary.json carries torch_ref.json whole: one file fewer of the 8 that come back.
[ -s "$OUT/summary.json" ] && rm -f "$OUT/torch_ref.json"
# What to commit (every GPU number in docs traced to its run): the small text
# files as they came back, in the session that made the call, e.g. for an H100 on 2026-11-28
#   d=bench/results/gpu/2026-11-28-h100; mkdir -p $d
#   cp FILES_AT/{summary.json,rows.md,errors.txt} $d/ && git add $d   # FILES_AT: run's files_at
# (the card as nvidia-smi names it, shortened: h100, h200). The logs (*.log.gz) stay out of git.
echo "gpu-check: small text to commit under bench/results/gpu/<date>-<card>/:" \
  "$(cd "$OUT" && du -ch summary.json rows.md errors.txt 2>/dev/null | tail -1 | cut -f1) in" \
  "$(cd "$OUT" && ls summary.json rows.md errors.txt 2>/dev/null | tr '\n' ' ')"
# Every file that comes back under 16 MiB: logs gzip -9; a log still too big keeps its first and
# last 20,000 lines.
for f in "$OUT"/*.log; do
  [ -f "$f" ] || continue
  gzip -9 -f "$f"
  if [ "$(stat -c %s "$f.gz")" -gt $((15 << 20)) ]; then
    { zcat "$f.gz" | head -20000; echo "... (cut: over 16 MiB compressed)"; zcat "$f.gz" | tail -20000; } |
      gzip -9 > "$f.cut.gz" && mv "$f.cut.gz" "$f.gz"
  fi
done
echo "gpu-check: done in $(( $(date +%s) - start ))s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
