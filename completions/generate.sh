#!/usr/bin/env bash
# Regenerate the shell completion scripts from the installed CLI (tests/test_completions.py keeps them current).
set -euo pipefail
cd "$(dirname "$0")"
_RBLNCTL_COMPLETE=source_bash rblnctl > rblnctl.bash
_RBLNCTL_COMPLETE=source_zsh rblnctl > _rblnctl
_RBLNCTL_COMPLETE=source_fish rblnctl > rblnctl.fish
