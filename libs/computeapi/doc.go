// Package computeapi is the Compute API contract: openapi.yaml is the source
// of truth; the models, the chi server interface and the typed client in
// computeapi.gen.go are generated from it by oapi-codegen (`go generate`).
package computeapi

//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi.yaml
