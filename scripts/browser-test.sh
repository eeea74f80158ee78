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
cargo test --release --test report_browser -- --ignored --nocapture
