package api

import (
	"strings"
	"testing"
)

// TestConfigAndSecretValidation: key names, the 1 MiB bound and a key in
// both a Config's data and files are refused naming the field; a Secret
// needs values, or (stored) its sealing.
func TestConfigAndSecretValidation(t *testing.T) {
	big := `"` + strings.Repeat("x", MaxConfigBytes) + `"`
	tests := []struct {
		name, kind, spec string
		field, code      string // "" for valid
	}{
		{"config", KindConfig, `{"data":{"LOG_LEVEL":"info","a.b-c_d":"x"},"files":{"nginx.conf":"listen 80;"}}`, "", ""},
		{"empty config", KindConfig, `{}`, "", ""},
		{"slash in key", KindConfig, `{"data":{"a/b":"x"}}`, "spec.data.a/b", CodeInvalid},
		{"space in key", KindConfig, `{"files":{"my file":"x"}}`, "spec.files.my file", CodeInvalid},
		{"dot-dot key", KindConfig, `{"files":{"..":"x"}}`, "spec.files...", CodeInvalid},
		{"empty key", KindConfig, `{"data":{"":"x"}}`, "spec.data", CodeInvalid},
		{"long key", KindConfig, `{"data":{"` + strings.Repeat("k", 254) + `":"x"}}`, "spec.data." + strings.Repeat("k", 254), CodeInvalid},
		{"in data and files", KindConfig, `{"data":{"app.conf":"a"},"files":{"app.conf":"b"}}`, "spec.files.app.conf", CodeDuplicate},
		{"config over 1 MiB", KindConfig, `{"data":{"a":` + big + `}}`, "spec", CodeTooLarge},
		{"config over 1 MiB across data and files", KindConfig, `{"data":{"a":"` + strings.Repeat("x", MaxConfigBytes/2) + `"},"files":{"b":"` + strings.Repeat("x", MaxConfigBytes/2) + `"}}`, "spec", CodeTooLarge},
		{"secret", KindSecret, `{"data":{"PASSWORD":"p"}}`, "", ""},
		{"stored secret", KindSecret, `{"keys":["PASSWORD"],"digest":"ab","sealed":{"keyID":"k1","wrappedKey":"AA==","nonce":"AA==","ciphertext":"AA=="}}`, "", ""},
		{"secret without values", KindSecret, `{}`, "spec.data", CodeRequired},
		{"secret bad key", KindSecret, `{"data":{"pass word":"p"}}`, "spec.data.pass word", CodeInvalid},
		{"secret over 1 MiB", KindSecret, `{"data":{"a":` + big + `}}`, "spec.data", CodeTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"` + tc.kind + `","metadata":{"project":"p","name":"c"},"spec":` + tc.spec + `}`))
			if err != nil {
				t.Fatal(err)
			}
			w.Spec.Default()
			fe := Validate(w)
			if tc.field == "" {
				if len(fe) > 0 {
					t.Fatalf("refused: %v", fe)
				}
				if d := DemandOf(w); d.Pods != 0 || d.MilliCPU != 0 {
					t.Errorf("demand %+v, want none", d)
				}
				return
			}
			for _, e := range fe {
				if e.Field == tc.field && e.Code == tc.code {
					return
				}
			}
			t.Errorf("errors %v, want %s on %s", fe, tc.code, tc.field)
		})
	}
}
