#!/usr/bin/env bash
# Seeds the cargo-fuzz corpora from the test fixtures and the hand-written seeds in
# fuzz/seeds/. The corpora (fuzz/corpus/<target>/) are generated and not committed;
# the seeds and fuzz/regressions/ are. Safe to rerun: files are copied, never deleted.
#
#   scripts/fuzz-seed.sh && (cd fuzz && cargo +nightly fuzz run flight_recorder)
set -euo pipefail
cd "$(dirname "$0")/.."

seed() { # target, files...
  local target=$1
  shift
  mkdir -p "fuzz/corpus/$target"
  local file
  for file in "$@"; do
    [ -f "$file" ] || continue
    # Flattened path as the name, so fixtures with equal names do not collide.
    cp "$file" "fuzz/corpus/$target/$(echo "$file" | tr '/' '_')"
  done
}

for target in config wire_frame flight_recorder kmsg_line ras_status; do
  seed "$target" fuzz/seeds/"$target"/* fuzz/regressions/"$target"/*
done
seed config crates/gpuvet-model/tests/fixtures/pai_sample.json
seed flight_recorder $(find crates/gpuvet-watch/tests/fixtures/fr -type f ! -name '*.py' | sort)

for target in config wire_frame flight_recorder kmsg_line ras_status; do
  echo "$target: $(ls "fuzz/corpus/$target" | wc -l) seed files"
done
