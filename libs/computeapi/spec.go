package computeapi

import _ "embed"

// SpecYAML is the contract as written: openapi.yaml.
//
//go:embed openapi.yaml
var SpecYAML []byte
