package computeapi_test

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"atoll.dev/libs/computeapi"
)

// TestContractValidates: openapi.yaml passes kin-openapi's validator, an
// independent reading of the OpenAPI 3 rules (oapi-codegen is lenient).
func TestContractValidates(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(computeapi.SpecYAML)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI 3 document: %v", err)
	}
}
