#!/usr/bin/env bash
# Builds this example and exercises it over real HTTP; `make test` in the repository runs it.
# Its own scratch path: PipelineKit with the Vapor trait is compiled with other flags than the
# other examples' (a trait is defined for every target of the package), so sharing theirs would
# rebuild both on each run. ../check-app.py says what is checked.
exec "$(dirname "$0")/../run-app-check.sh" "$(dirname "$0")" vapor-app ../.build-vapor --upload multipart --disconnect completes
