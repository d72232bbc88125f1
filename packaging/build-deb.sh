#!/usr/bin/env bash
# Builds the kudurru .deb: release binaries, then the man pages and shell completions written
# by that `kudurru`, then `cargo deb --no-build` packs them as control/Cargo.toml lists
# ([package.metadata.deb]), with the binaries stripped and their debug information (line
# tables, for backtraces) in a kudurru-dbgsym .ddeb beside it. Prints the package paths last.
# Needs cargo-deb (`cargo install cargo-deb --locked`).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${CARGO_TARGET_DIR:-target}/release"
cargo build --release --locked -p kudurru-control -p kudurru-bench --bin kudurru --bin kudurru-bench
rm -rf "$out/man" "$out/completions"
"$out/kudurru" man "$out/man"
gzip -9n "$out"/man/*.1
mkdir -p "$out/completions"
"$out/kudurru" completions bash >"$out/completions/kudurru.bash"
"$out/kudurru" completions zsh >"$out/completions/_kudurru"
"$out/kudurru" completions fish >"$out/completions/kudurru.fish"
cargo deb -p kudurru-control --locked --no-build --dbgsym --compress-debug-symbols=zlib "$@"
