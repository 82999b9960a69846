package api

import "testing"

// TestAppUpdateStrategy: an App takes RollingUpdate, InPlaceIfPossible or
// nothing; anything else is refused naming spec.updateStrategy.
func TestAppUpdateStrategy(t *testing.T) {
	cases := []struct {
		strategy string
		inPlace  bool
		ok       bool
	}{
		{"", false, true},
		{UpdateRollingUpdate, false, true},
		{UpdateInPlaceIfPossible, true, true},
		{"inplaceifpossible", false, false},
		{"ReCreate", false, false},
	}
	for _, c := range cases {
		t.Run(c.strategy, func(t *testing.T) {
			w, err := Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"a"},"spec":{"updateStrategy":"` + c.strategy + `",
"template":{"containers":[{"name":"c","image":"i:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`))
			if err != nil {
				t.Fatal(err)
			}
			w.Spec.Default()
			fe := Validate(w)
			refused := false
			for _, e := range fe {
				refused = refused || e.Field == "spec.updateStrategy"
			}
			if refused == c.ok {
				t.Errorf("errors %v: refused %v, want %v", fe, refused, !c.ok)
			}
			if got := w.Spec.(*AppSpec).InPlace(); got != c.inPlace {
				t.Errorf("InPlace() = %v, want %v", got, c.inPlace)
			}
		})
	}
}
