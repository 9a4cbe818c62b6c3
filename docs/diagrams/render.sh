#!/usr/bin/env bash
# Draws every docs/diagrams/*.mmd into docs/img/<name>.svg with mermaid-cli, so that the
# site shows the diagrams as images, offline too. Needs Node.js and a Chromium:
#   npm install @mermaid-js/mermaid-cli   (with PUPPETEER_SKIP_DOWNLOAD=1 to use the system's)
#   PATH=node_modules/.bin:$PATH CHROMIUM=/usr/bin/chromium bash docs/diagrams/render.sh
set -euo pipefail
cd "$(dirname "$0")"
config=$(mktemp)
trap 'rm -f "$config"' EXIT
printf '{"executablePath": "%s", "args": ["--no-sandbox"]}\n' "${CHROMIUM:-/usr/bin/chromium}" > "$config"
for diagram in *.mmd; do
  mmdc --quiet --puppeteerConfigFile "$config" --backgroundColor white \
    --input "$diagram" --output "../img/${diagram%.mmd}.svg"
done
