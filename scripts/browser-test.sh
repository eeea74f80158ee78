#!/usr/bin/env bash
# Renders the HTML report in headless Chromium and checks it (tests/report_browser.rs).
# Installs Debian's chromium when it is missing (apt-get update once, then install).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
    echo "== installing Debian's chromium"
    apt-get update
    apt-get install -y chromium
fi
chromium --version
# --workspace: the same features as the README's test command, so that the test binary it
# built is run again, not rebuilt with the root package's features alone.
cargo test --release --workspace --test report_browser -- --ignored --nocapture
