#!/usr/bin/env bash
# Builds this example and exercises it over real HTTP; `make test` in the repository runs it.
# Built in the scratch path the repository's examples share, so that PipelineKit is compiled
# once; ../check-app.py says what is checked.
exec "$(dirname "$0")/../run-app-check.sh" "$(dirname "$0")" hummingbird-app ../.build-examples --upload raw --disconnect cancels
