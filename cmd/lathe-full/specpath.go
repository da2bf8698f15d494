package main

import "github.com/lathe-ml/lathe/internal/specpath"

// rewriteLocalPaths and localPathURI are internal/specpath's: a spec
// file's relative local paths resolved against its folder (shared with the
// scheduler, which resolves a scheduled job or sweep file's the same way).
var (
	rewriteLocalPaths = specpath.Resolve
	localPathURI      = specpath.LocalURI
)
