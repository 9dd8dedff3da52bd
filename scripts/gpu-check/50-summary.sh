# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): summary.json (scripts/gpu-check/summary.py) and the logs
# compressed to come back.
# ---- 6. summary.json -----------------------------------------------------------------------------
python3 "$repo/scripts/gpu-check/summary.py" "$results" "$bdir" "$OUT" "$cuda_on" "$(git rev-parse HEAD 2>/dev/null)"
rm -f "$results"; rm -rf "$bdir"
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
