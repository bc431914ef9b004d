#ifndef PIPELINECTL_CBUILDINFO_H
#define PIPELINECTL_CBUILDINFO_H
// What identifies a build beyond its version: the source revision it was built from. Package.swift
// defines PIPELINECTL_REVISION from the environment variable of that name (the Makefile sets it to
// `git describe --always --dirty`); a build without it says "unknown".

/// The source revision this binary was built from, or "unknown".
const char *pk_build_revision(void);

#endif
