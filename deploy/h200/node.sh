#!/usr/bin/env bash
# The GPU node's runner, from the repository root there: bash deploy/h200/node.sh VERB [ARGS]
# Verbs (node.py says more): stash, install, model, start SPEC, profile SPEC,
# resume [TARBALL], poll, wait SECONDS, fetch, stop.
# Runs with the node's python3 (H200_NODE_PYTHON overrides).
exec "${H200_NODE_PYTHON:-python3}" "$(dirname "$0")/node.py" "$@"
