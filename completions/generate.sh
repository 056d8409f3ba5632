#!/usr/bin/env bash
# Regenerate the shell completion scripts from the installed CLI (tests/test_completions.py keeps them current).
set -euo pipefail
cd "$(dirname "$0")"
rblnctl completion bash > rblnctl.bash
rblnctl completion zsh > _rblnctl
rblnctl completion fish > rblnctl.fish
