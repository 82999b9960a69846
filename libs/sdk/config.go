package sdk

import (
	"encoding/json"
	"fmt"

	"atoll.dev/libs/computeapi"
)

// Kinds of configuration, as documents name them.
const (
	KindConfig = "Config"
	KindSecret = "Secret"
)

// NewConfig is the document of a Config: data as variables, files by
// their names (a key may be in only one of them).
func NewConfig(name string, labels map[string]string, spec computeapi.ConfigSpec) (computeapi.WorkloadDocument, error) {
	return newDocument(KindConfig, name, labels, spec)
}

// NewSecret is the document of a Secret: every key and value, as a
// create or an update writes them (no read returns them).
func NewSecret(name string, labels map[string]string, data map[string]string) (computeapi.WorkloadDocument, error) {
	return newDocument(KindSecret, name, labels, computeapi.SecretSpec{Data: data})
}

func newDocument(kind, name string, labels map[string]string, spec any) (computeapi.WorkloadDocument, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return computeapi.WorkloadDocument{}, fmt.Errorf("%s %s: encode: %w", kind, name, err)
	}
	return computeapi.WorkloadDocument{ApiVersion: "atoll.dev/v1", Kind: computeapi.WorkloadDocumentKind(kind),
		Metadata: computeapi.DocumentMetadata{Name: name, Labels: labels}, Spec: raw}, nil
}

// SecretOf is what a read shows of a Secret: its keys, version, digest,
// and who wrote its values and when.
func SecretOf(w *computeapi.Workload) (*computeapi.SecretView, error) {
	if w.Kind != KindSecret {
		return nil, fmt.Errorf("%s %s is not a Secret", w.Kind, w.Metadata.Name)
	}
	var v computeapi.SecretView
	if err := json.Unmarshal(w.Spec, &v); err != nil {
		return nil, fmt.Errorf("secret %s: %w", w.Metadata.Name, err)
	}
	return &v, nil
}

// ConfigOf is a Config's data and files.
func ConfigOf(w *computeapi.Workload) (*computeapi.ConfigSpec, error) {
	if w.Kind != KindConfig {
		return nil, fmt.Errorf("%s %s is not a Config", w.Kind, w.Metadata.Name)
	}
	var v computeapi.ConfigSpec
	if err := json.Unmarshal(w.Spec, &v); err != nil {
		return nil, fmt.Errorf("config %s: %w", w.Metadata.Name, err)
	}
	return &v, nil
}
